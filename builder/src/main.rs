//! `oxccl-builder [build] [--workspace DIR] [--check] [--require-ptxas] [--no-ptxas] [--ptxas-threads N]`

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use oxccl_builder::{nvptx, Config, PtxasMode, PtxasReport, Report};

/// Builds the oxccl device crate to ptx/oxccl.ptx, ptx/oxccl_device.bc (with its C header
/// ptx/oxccl_device.h), and checks its kernels with ptxas.
#[derive(Debug, Parser)]
#[command(name = "oxccl-builder", version)]
struct Cli {
    #[command(subcommand)]
    command: Option<Cmd>,
    /// The workspace root (default: the workspace this builder was compiled in).
    #[arg(long, global = true, value_name = "DIR")]
    workspace: Option<PathBuf>,
    /// Build into a temporary folder and fail if the result differs from the committed ptx/.
    #[arg(long, global = true)]
    check: bool,
    /// Fail when ptxas is not found.
    #[arg(long, global = true, conflicts_with = "no_ptxas")]
    require_ptxas: bool,
    /// Do not run ptxas.
    #[arg(long, global = true)]
    no_ptxas: bool,
    /// Threads ptxas may use (its `-split-compile`; 0 = one per CPU). The default, 1, makes
    /// the cubin the GPU results were measured with; more threads make the same register
    /// and spill report (checked on this tree's 125 kernels) in less time, for CI, but not
    /// a byte-identical cubin.
    #[arg(long, global = true, default_value_t = 1, value_name = "N")]
    ptxas_threads: u32,
    /// Show the nested cargo's output.
    #[arg(long, short, global = true)]
    verbose: bool,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Build the device crate (the default).
    Build,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let (Some(Cmd::Build) | None) = cli.command;
    match run(&cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("oxccl-builder: error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: &Cli) -> oxccl_builder::Result<()> {
    let workspace = cli
        .workspace
        .clone()
        .unwrap_or_else(oxccl_builder::default_workspace);
    let mut cfg = Config::new(&workspace)?;
    cfg.verbose = cli.verbose;
    cfg.ptxas_threads = cli.ptxas_threads;
    cfg.ptxas = match (cli.require_ptxas, cli.no_ptxas) {
        (true, _) => PtxasMode::Require,
        (_, true) => PtxasMode::Skip,
        _ => PtxasMode::Auto,
    };
    println!(
        "building {} for {} ({}, PTX ISA {}, profile {}) in {}",
        cfg.device_dir.display(),
        nvptx::TARGET,
        nvptx::TARGET_CPU,
        nvptx::PTX_VERSION_LINE.trim_start_matches(".version "),
        nvptx::PROFILE,
        cfg.target_dir.display()
    );
    let report = if cli.check {
        oxccl_builder::check(&cfg)?
    } else {
        oxccl_builder::build(&cfg)?
    };
    print_report(&report, cli.check, &cfg.hot_kernels);
    Ok(())
}

fn print_report(r: &Report, check: bool, hot: &[String]) {
    let verb = if check { "up to date:" } else { "wrote" };
    println!("{verb} {} ({} bytes)", r.ptx.display(), r.ptx_bytes);
    println!("{verb} {} ({} bytes)", r.bitcode.display(), r.bitcode_bytes);
    println!("{verb} {} ({} bytes)", r.header.display(), r.header_bytes);
    println!(
        "kernels: {} ({} hot: {})",
        r.entries.len(),
        hot.len(),
        hot.join(", ")
    );
    match &r.ptxas {
        PtxasReport::Skipped(why) => println!("ptxas: {why}"),
        PtxasReport::Ran { ptxas, usages } => {
            let hot: Vec<&str> = hot.iter().map(String::as_str).collect();
            println!(
                "ptxas: {} -arch={} (* = hot, no spills allowed)",
                ptxas.display(),
                nvptx::TARGET_CPU
            );
            print!("{}", oxccl_builder::ptxas::table(usages, &hot));
        }
    }
}
