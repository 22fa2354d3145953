//! `tidegate`: the message hub's one binary — `serve`, `config`, `bench`.

mod cli;
mod config;
mod http;
mod logging;
mod serve;

use std::process::ExitCode;

use clap::Parser;

use crate::cli::{Cli, Command};

fn main() -> ExitCode {
    let cli = Cli::parse();
    logging::init(cli.log_format);
    match cli.command {
        Command::Config { config } => match config::load(config.as_deref()) {
            Ok(c) => {
                print!("{}", config::render(&c));
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("tidegate: {e}");
                ExitCode::from(2)
            }
        },
        Command::Serve { config } => {
            let cfg = match config::load(config.as_deref()) {
                Ok(c) => c,
                Err(e) => {
                    eprintln!("tidegate: {e}");
                    return ExitCode::from(2);
                }
            };
            match runtime().block_on(serve::serve(cfg)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(serve::ServeError::Config(e)) => {
                    eprintln!("tidegate: {e}");
                    ExitCode::from(2)
                }
                Err(e) => {
                    eprintln!("tidegate: {e}");
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
