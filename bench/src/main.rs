use clap::Parser;

fn main() -> std::process::ExitCode {
    let cli = screenlimit_bench::Cli::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    match runtime.block_on(screenlimit_bench::run(cli)) {
        Ok(report) if report.ok() => std::process::ExitCode::SUCCESS,
        Ok(_) => std::process::ExitCode::from(1),
        Err(e) => {
            eprintln!("screenlimit-loadgen: {e:#}");
            std::process::ExitCode::from(2)
        }
    }
}
