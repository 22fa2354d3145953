//! [`TestBroker`]: one Kafka 3.9.1 broker+controller (KRaft) in a temp dir.
//!
//! `start` formats the storage, launches `kafka.Kafka` on two free loopback
//! ports and returns once the broker logs that it started. The process is
//! killed on drop, on [`TestBroker::stop`], and — through a watchdog shell
//! holding a pipe from this process — when the test process itself dies, so
//! a broker kept in a `static` never outlives its test binary.

use std::fs::File;
use std::io::{self, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use thiserror::Error;

use super::maven::kafka_classpath;

/// How long a broker may take to start before `start` gives up.
pub const START_TIMEOUT: Duration = Duration::from_secs(90);

/// The log line that says the broker is serving.
const STARTED: &str = "Kafka Server started";

/// A fixed KRaft cluster id (any 16 bytes in URL-safe base64).
const CLUSTER_ID: &str = "VGlkZWdhdGVUZXN0Q2x1cw";

/// Why a test broker could not be started.
#[derive(Debug, Error)]
pub enum TestBrokerError {
    /// A file or process operation failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The underlying error.
        source: io::Error,
    },
    /// Maven could not resolve a classpath.
    #[error("mvn could not resolve {pom}:\n{output}")]
    Maven {
        /// The pom.
        pom: PathBuf,
        /// Maven's output.
        output: String,
    },
    /// `StorageTool format` failed.
    #[error("formatting the KRaft storage failed:\n{0}")]
    Format(String),
    /// The broker exited or did not start in time.
    #[error("the Kafka broker did not start ({reason}); last log lines:\n{log_tail}")]
    NotStarted {
        /// `exited with …` or `timed out`.
        reason: String,
        /// The end of the broker's output.
        log_tail: String,
    },
}

impl TestBrokerError {
    pub(crate) fn io(what: impl Into<String>, source: io::Error) -> Self {
        TestBrokerError::Io {
            what: what.into(),
            source,
        }
    }
}

/// A running (or stopped) single-node broker owned by a test.
#[derive(Debug)]
pub struct TestBroker {
    dir: tempfile::TempDir,
    port: u16,
    classpath: String,
    starts: u32,
    running: Option<Running>,
}

#[derive(Debug)]
struct Running {
    java: Child,
    watchdog: Child,
    /// Closing it (our exit) makes the watchdog kill the broker.
    _lifeline: Option<ChildStdin>,
}

impl TestBroker {
    /// Fetches the jars if needed, formats a fresh log dir and starts the
    /// broker; returns once it serves on [`TestBroker::bootstrap`].
    pub fn start() -> Result<TestBroker, TestBrokerError> {
        let classpath = kafka_classpath()?;
        let dir = tempfile::Builder::new()
            .prefix("tidegate-kafka-")
            .tempdir()
            .map_err(|e| TestBrokerError::io("creating the broker dir", e))?;
        let (port, controller_port) = free_ports()?;
        let mut broker = TestBroker {
            dir,
            port,
            classpath,
            starts: 0,
            running: None,
        };
        broker.write_config(controller_port)?;
        broker.format()?;
        broker.launch()?;
        Ok(broker)
    }

    /// One broker shared by every test of this test binary (started on first
    /// use; killed by its watchdog when the binary exits). Tests sharing it
    /// use distinct topics.
    pub fn shared() -> Result<&'static TestBroker, TestBrokerError> {
        static SHARED: OnceLock<TestBroker> = OnceLock::new();
        static STARTING: parking_lot::Mutex<()> = parking_lot::Mutex::new(());
        let _g = STARTING.lock();
        if let Some(b) = SHARED.get() {
            return Ok(b);
        }
        let b = TestBroker::start()?;
        Ok(SHARED.get_or_init(|| b))
    }

    /// `127.0.0.1:<port>`, for `bootstrap.servers`.
    pub fn bootstrap(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The broker's PLAINTEXT port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// True while the broker process runs.
    pub fn is_running(&mut self) -> bool {
        match &mut self.running {
            Some(r) => matches!(r.java.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// Kills the broker with SIGKILL (a crash, not a clean shutdown) and
    /// waits for it to be gone. Its data stays for [`TestBroker::restart`].
    pub fn stop(&mut self) {
        if let Some(mut r) = self.running.take() {
            // The watchdog first, so it can never kill a recycled pid.
            let _ = r.watchdog.kill();
            let _ = r.watchdog.wait();
            let _ = r.java.kill();
            let _ = r.java.wait();
        }
    }

    /// Freezes the broker (SIGSTOP): its connections stay open and nothing
    /// answers, as with a hung broker. [`TestBroker::resume`] undoes it.
    pub fn pause(&self) -> Result<(), TestBrokerError> {
        self.signal("-STOP")
    }

    /// Lets a [`TestBroker::pause`]d broker run again (SIGCONT).
    pub fn resume(&self) -> Result<(), TestBrokerError> {
        self.signal("-CONT")
    }

    fn signal(&self, sig: &str) -> Result<(), TestBrokerError> {
        let Some(r) = &self.running else {
            return Ok(());
        };
        let status = std::process::Command::new("kill")
            .args([sig, &r.java.id().to_string()])
            .status()
            .map_err(|e| TestBrokerError::io(format!("kill {sig}"), e))?;
        if status.success() {
            Ok(())
        } else {
            Err(TestBrokerError::io(
                format!("kill {sig}"),
                io::Error::other(format!("exit {status}")),
            ))
        }
    }

    /// Starts the broker again on the same ports and data (stopping it first
    /// if it runs); returns once it serves.
    pub fn restart(&mut self) -> Result<(), TestBrokerError> {
        self.stop();
        self.launch()
    }

    /// Everything the broker printed since its last start.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join(format!("broker-{}.log", self.starts))
    }

    /// A single-node KRaft broker with replication factor 1 everywhere (the
    /// set-up verified for Kafka 3.9 here), plus a short broker session so
    /// a broker restarted after SIGKILL re-registers in ~2 s instead of
    /// waiting out the default 9 s session of its old self.
    fn write_config(&self, controller_port: u16) -> Result<(), TestBrokerError> {
        let d = self.dir.path();
        let props = format!(
            "process.roles=broker,controller\n\
             node.id=1\n\
             controller.quorum.voters=1@127.0.0.1:{controller_port}\n\
             listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}\n\
             advertised.listeners=PLAINTEXT://127.0.0.1:{port}\n\
             controller.listener.names=CONTROLLER\n\
             inter.broker.listener.name=PLAINTEXT\n\
             listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT\n\
             log.dirs={logs}\n\
             num.partitions=1\n\
             offsets.topic.replication.factor=1\n\
             transaction.state.log.replication.factor=1\n\
             transaction.state.log.min.isr=1\n\
             group.initial.rebalance.delay.ms=0\n\
             broker.heartbeat.interval.ms=500\n\
             broker.session.timeout.ms=2000\n",
            port = self.port,
            logs = d.join("data").display(),
        );
        let log4j = "log4j.rootLogger=INFO, stdout\n\
             log4j.appender.stdout=org.apache.log4j.ConsoleAppender\n\
             log4j.appender.stdout.layout=org.apache.log4j.PatternLayout\n\
             log4j.appender.stdout.layout.ConversionPattern=[%d] %p %m (%c)%n\n\
             log4j.logger.kafka.log=WARN\n\
             log4j.logger.org.apache.kafka.storage=WARN\n";
        write(d.join("server.properties"), &props)?;
        write(d.join("log4j.properties"), log4j)
    }

    fn java(&self) -> Command {
        let mut c = Command::new("java");
        c.arg(format!(
            "-Dlog4j.configuration=file:{}",
            self.dir.path().join("log4j.properties").display()
        ))
        .arg("-cp")
        .arg(&self.classpath)
        .current_dir(self.dir.path());
        c
    }

    fn format(&self) -> Result<(), TestBrokerError> {
        let out = self
            .java()
            .arg("-XX:TieredStopAtLevel=1")
            .args(["kafka.tools.StorageTool", "format", "-t", CLUSTER_ID, "-c"])
            .arg(self.dir.path().join("server.properties"))
            .output()
            .map_err(|e| {
                TestBrokerError::io(
                    "running java (is a JDK installed? run scripts/setup/kafka.sh)",
                    e,
                )
            })?;
        if !out.status.success() {
            return Err(TestBrokerError::Format(format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )));
        }
        Ok(())
    }

    fn launch(&mut self) -> Result<(), TestBrokerError> {
        self.starts += 1;
        let log = File::create(self.log_path())
            .map_err(|e| TestBrokerError::io("creating the broker log", e))?;
        let log2 = log
            .try_clone()
            .map_err(|e| TestBrokerError::io("cloning the broker log", e))?;
        let java = self
            .java()
            .args(["-Xms256m", "-Xmx512m", "kafka.Kafka"])
            .arg(self.dir.path().join("server.properties"))
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2)
            .spawn()
            .map_err(|e| {
                TestBrokerError::io(
                    "starting java (is a JDK installed? run scripts/setup/kafka.sh)",
                    e,
                )
            })?;
        let mut watchdog = Command::new("sh")
            .arg("-c")
            .arg("cat >/dev/null; kill -9 \"$1\" 2>/dev/null; rm -rf \"$2\"")
            .arg("tidegate-kafka-watchdog")
            .arg(java.id().to_string())
            .arg(self.dir.path())
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| TestBrokerError::io("starting the broker watchdog", e))?;
        let lifeline = watchdog.stdin.take();
        self.running = Some(Running {
            java,
            watchdog,
            _lifeline: lifeline,
        });
        self.wait_started()
    }

    fn wait_started(&mut self) -> Result<(), TestBrokerError> {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if self.log().contains(STARTED) {
                return Ok(());
            }
            let exited = match &mut self.running {
                Some(r) => r.java.try_wait().ok().flatten().map(|s| s.to_string()),
                None => Some("not running".to_owned()),
            };
            let reason = match exited {
                Some(status) => Some(format!("exited with {status}")),
                None if Instant::now() > deadline => Some("timed out".to_owned()),
                None => None,
            };
            if let Some(reason) = reason {
                let log = self.log();
                let tail: Vec<&str> = log.lines().rev().take(30).collect();
                let log_tail = tail.into_iter().rev().collect::<Vec<_>>().join("\n");
                self.stop();
                return Err(TestBrokerError::NotStarted { reason, log_tail });
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for TestBroker {
    fn drop(&mut self) {
        self.stop();
    }
}

fn write(path: PathBuf, text: &str) -> Result<(), TestBrokerError> {
    File::create(&path)
        .and_then(|mut f| f.write_all(text.as_bytes()))
        .map_err(|e| TestBrokerError::io(format!("writing {}", path.display()), e))
}

/// Two distinct loopback ports for the broker and its controller, from
/// below the ephemeral range ([`tidegate_testkit::free_addrs`]): the JVM
/// binds them seconds later, and a port in the ephemeral range could be
/// taken meanwhile as some connection's source port.
fn free_ports() -> Result<(u16, u16), TestBrokerError> {
    let [a, b] = tidegate_testkit::free_ports();
    Ok((a.port(), b.port()))
}
