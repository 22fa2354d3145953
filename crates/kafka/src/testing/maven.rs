//! Runtime classpaths of the Java peers, resolved with Maven and cached.
//!
//! Each pom under `crates/kafka/tests/java/<name>/` lists one peer's
//! artifacts; `mvn dependency:build-classpath` downloads them into the local
//! Maven repository and writes the classpath, which is cached under
//! [`cache_dir`] keyed by a hash of the pom so a changed pom re-resolves.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::process::Command;

use parking_lot::Mutex;

use super::TestBrokerError;

/// Serialises resolutions within one process (tests run in parallel).
static RESOLVING: Mutex<()> = Mutex::new(());

/// Where resolved classpaths are cached: `$TIDEGATE_TEST_CACHE`, else
/// `$HOME/.cache/tidegate`, else the system temp dir.
pub fn cache_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("TIDEGATE_TEST_CACHE") {
        return PathBuf::from(d);
    }
    match std::env::var_os("HOME") {
        Some(h) => PathBuf::from(h).join(".cache").join("tidegate"),
        None => std::env::temp_dir().join("tidegate-cache"),
    }
}

/// `crates/kafka/tests/java`: the poms and Java helper programs.
pub fn java_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join("java")
}

/// Classpath of the Kafka 3.9.1 broker and of `kafka-tools`
/// (`org.apache.kafka.tools.ProducerPerformance`).
pub fn kafka_classpath() -> Result<String, TestBrokerError> {
    classpath(&java_dir().join("broker").join("pom.xml"))
}

/// Classpath of Fluency (`org.komamitsu:fluency-fluentd`) and a logger.
pub fn fluency_classpath() -> Result<String, TestBrokerError> {
    classpath(&java_dir().join("fluency").join("pom.xml"))
}

/// Resolves (once, then from the cache) the runtime classpath of `pom`.
pub fn classpath(pom: &Path) -> Result<String, TestBrokerError> {
    let text = std::fs::read(pom)
        .map_err(|e| TestBrokerError::io(format!("reading {}", pom.display()), e))?;
    let mut h = DefaultHasher::new();
    text.hash(&mut h);
    let name = pom
        .parent()
        .and_then(Path::file_name)
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "pom".to_owned());
    let cached = cache_dir().join(format!("{name}-{:016x}.classpath", h.finish()));

    let _guard = RESOLVING.lock();
    if let Some(cp) = read_valid(&cached) {
        return Ok(cp);
    }
    std::fs::create_dir_all(cache_dir())
        .map_err(|e| TestBrokerError::io(format!("creating {}", cache_dir().display()), e))?;
    let partial = cached.with_extension(format!("partial-{}", std::process::id()));
    let out = Command::new("mvn")
        .args(["-q", "-B", "-f"])
        .arg(pom)
        .arg("dependency:build-classpath")
        .arg(format!("-Dmdep.outputFile={}", partial.display()))
        .output()
        .map_err(|e| {
            TestBrokerError::io(
                "running mvn (is Maven installed? run scripts/setup/kafka.sh)",
                e,
            )
        })?;
    if !out.status.success() {
        return Err(TestBrokerError::Maven {
            pom: pom.to_path_buf(),
            output: format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        });
    }
    std::fs::rename(&partial, &cached)
        .map_err(|e| TestBrokerError::io(format!("writing {}", cached.display()), e))?;
    read_valid(&cached).ok_or_else(|| TestBrokerError::Maven {
        pom: pom.to_path_buf(),
        output: "mvn wrote an empty or stale classpath".to_owned(),
    })
}

/// The cached classpath if every jar it names still exists.
fn read_valid(path: &Path) -> Option<String> {
    let cp = std::fs::read_to_string(path).ok()?;
    let cp = cp.trim().to_owned();
    let ok = !cp.is_empty() && cp.split(':').all(|jar| Path::new(jar).exists());
    ok.then_some(cp)
}
