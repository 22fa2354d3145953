//! `tidegate`: the message hub's one binary — `serve`, `config`, `bench`,
//! `cluster status`.
//!
//! Exit codes: 0 clean stop; 2 the configuration cannot be served (named
//! file, key and reason); 1 a failure while serving (a listener down, a
//! sink unreachable on `config --probe`).

mod cli;
mod config;
mod fd_limit;
mod http;
mod logging;
mod preflight;
mod serve;
mod stats;

use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;

use crate::cli::{Cli, ClusterCommand, Command};

/// jemalloc instead of glibc's malloc: per-request allocations of the HTTP
/// path (hyper, axum's boxed services, bodies of a kilobyte or more) sent
/// glibc into `_int_malloc` and `malloc_consolidate` for 28 % of a KV
/// node's CPU; jemalloc's thread caches cut the CPU per PUT by about a third
/// at the same memory per idle session (BENCHMARKS.md, "Global allocator").
/// mimalloc was measured too and was slower here.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> ExitCode {
    let cli = Cli::parse();
    logging::init(cli.log_format);
    match cli.command {
        Command::Config {
            config,
            check,
            probe,
            probe_timeout_ms,
        } => {
            let cfg = match config::load(config.as_deref()) {
                Ok(c) => c,
                Err(e) => {
                    eprintln!("tidegate: {e}");
                    return ExitCode::from(2);
                }
            };
            if !check && !probe {
                print!("{}", config::render(&cfg));
                return ExitCode::SUCCESS;
            }
            runtime().block_on(async {
                let prepared = match preflight::prepare(cfg, config.as_deref()) {
                    Ok(p) => p,
                    Err(e) => {
                        eprintln!("tidegate: {e}");
                        return ExitCode::from(2);
                    }
                };
                print!("{}", preflight::summary(&prepared));
                if probe {
                    match preflight::probe(&prepared, Duration::from_millis(probe_timeout_ms)).await
                    {
                        Ok(found) => print!("{found}"),
                        Err(e) => {
                            eprintln!("tidegate: {e}");
                            return ExitCode::FAILURE;
                        }
                    }
                }
                ExitCode::SUCCESS
            })
        }
        Command::Serve { config } => {
            let cfg = match config::load(config.as_deref()) {
                Ok(c) => c,
                Err(e) => {
                    eprintln!("tidegate: {e}");
                    return ExitCode::from(2);
                }
            };
            fd_limit::raise(&cfg);
            match runtime().block_on(serve::serve(cfg, config.as_deref())) {
                Ok(()) => ExitCode::SUCCESS,
                Err(serve::ServeError::Preflight(e)) => {
                    eprintln!("tidegate: {e}");
                    ExitCode::from(2)
                }
                Err(e) => {
                    eprintln!("tidegate: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::Cluster {
            action:
                ClusterCommand::Status {
                    config,
                    json,
                    timeout_ms,
                },
        } => {
            let cfg = match config::load(config.as_deref()) {
                Ok(c) => c,
                Err(e) => {
                    eprintln!("tidegate: {e}");
                    return ExitCode::from(2);
                }
            };
            let Some(cluster) = cfg.cluster else {
                eprintln!("tidegate: the configuration has no [cluster] section");
                return ExitCode::from(2);
            };
            let timeout = Duration::from_millis(timeout_ms);
            match tidegate_kafka::backbone::status(&cluster, timeout) {
                Ok(s) if json => {
                    println!("{}", serde_json::to_string(&s).expect("status serialises"));
                    ExitCode::SUCCESS
                }
                Ok(s) => {
                    print!("{s}");
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("tidegate: [cluster] brokers = {:?}: {e}", cluster.brokers);
                    ExitCode::FAILURE
                }
            }
        }
        Command::Bench { scenario } => match runtime().block_on(scenario.run()) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("tidegate bench: {e:#}");
                ExitCode::FAILURE
            }
        },
    }
}

/// A multi-threaded runtime sized to the machine's cores.
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("tidegate")
        .build()
        .expect("building the tokio runtime")
}
