//! `screenlimit-limiter`: the stream API server.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use screenlimit_limiter::config::{Config, ConfigError};
use screenlimit_limiter::module_file::{IMAGE_MODULE_PATH, copy_module};

// A play-start allocates in hyper, serde and the Redis client; mimalloc took 10 % off the
// limiter's CPU per request against the system allocator (BENCHMARKS.md, "Profile").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// screenlimit's stream limiter: per-account concurrent-stream leases over HTTP.
///
/// With no config it runs on the embedded in-memory store on 127.0.0.1:8080 with the plans
/// basic=1, standard=2, premium=4.
#[derive(Parser)]
#[command(version, after_help = env_help())]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    /// YAML config file (see README "Configuration").
    #[arg(long, short, env = "SCREENLIMIT_CONFIG")]
    config: Option<PathBuf>,
    /// Listen address; overrides the file and SCREENLIMIT_LISTEN.
    #[arg(long)]
    listen: Option<std::net::SocketAddr>,
    /// Log format.
    #[arg(long, env = "SCREENLIMIT_LOG_FORMAT", default_value = "text", value_parser = ["text", "json"])]
    log_format: String,
}

#[derive(Subcommand)]
enum Command {
    /// Copies the Redis module this image carries into DIR (the operator's init container does,
    /// into the Redis pod's emptyDir) and exits.
    CopyModule {
        /// The directory to copy it into (it must exist).
        dir: PathBuf,
        /// The module file.
        #[arg(long, default_value = IMAGE_MODULE_PATH)]
        from: PathBuf,
    },
}

fn env_help() -> String {
    let mut help = String::from("Environment overrides:\n");
    for (var, field) in screenlimit_limiter::config::ENV_OVERRIDES {
        help.push_str(&format!("  {var:<36} {field}\n"));
    }
    help.push_str("  RUST_LOG                             log filter (default: info)");
    help
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Some(Command::CopyModule { dir, from }) = &cli.command {
        return match copy_module(from, dir) {
            Ok(written) => {
                println!(
                    "screenlimit-limiter: the Redis module is at {}",
                    written.display()
                );
                ExitCode::SUCCESS
            }
            Err(error) => {
                eprintln!("screenlimit-limiter copy-module: {error}");
                ExitCode::FAILURE
            }
        };
    }
    screenlimit_limiter::lifecycle::init_tracing(&cli.log_format);
    let loaded = Config::load(cli.config.as_deref(), |name| std::env::var(name).ok())
        .and_then(|config| config.check_named_files().map(|()| config));
    let config = match loaded {
        Ok(mut config) => {
            if let Some(listen) = cli.listen {
                config.listen = listen;
                config.listen_flag = Some(listen);
            }
            config
        }
        Err(error) => {
            eprintln!("screenlimit-limiter: bad configuration: {error}");
            return ExitCode::from(2);
        }
    };
    // `server::run` builds its own runtimes: one single-threaded runtime per `threads`.
    match screenlimit_limiter::server::run(config) {
        Ok(()) => ExitCode::SUCCESS,
        // Found at start by contacting the store (a wrong password, a missing ACL permission).
        Err(error) if error.downcast_ref::<ConfigError>().is_some() => {
            eprintln!("screenlimit-limiter: bad configuration: {error}");
            ExitCode::from(2)
        }
        Err(error) => {
            eprintln!("screenlimit-limiter: {error:#}");
            ExitCode::FAILURE
        }
    }
}
