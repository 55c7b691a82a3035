//! The `mtplx-lite` binary: flags into each layer's settings, then serve (or bench, or generate).
//! It wires the layers; nothing imports it.

#![forbid(unsafe_code)]

mod cli;

use cli::{Cli, Command, Settings};

fn main() {
    let cli: Cli = cli::from_env();
    if cli.version {
        println!("mtplx-lite {}", env!("CARGO_PKG_VERSION"));
        return;
    }
    let settings = match Settings::from_cli(&cli) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("mtplx-lite: {e}");
            std::process::exit(2);
        }
    };
    let result = match &cli.command {
        None => cli::serve::run(settings),
        Some(Command::Bench(b)) => match &b.rows {
            Some(rows) => cli::bench::run_rows(&settings.model, rows, b.reps.max(1), b.context),
            None => cli::bench::run(&settings.model, b.prompt, b.generate, b.sequences),
        },
        Some(Command::Generate(g)) => {
            cli::bench::generate(&settings.model, &g.prompt, g.max_tokens, g.temperature, g.seed, g.chat)
        }
        Some(Command::Tune(t)) => cli::tune::run(&settings.model, t.out.as_deref(), t.max_tokens, t.reps.max(1)),
        Some(Command::Models(_)) => cli::models::list(),
        Some(Command::Pull(p)) => cli::models::pull(&p.name),
        Some(Command::Synth(s)) => cli::synth::run(s),
    };
    if let Err(e) = result {
        eprintln!("mtplx-lite: {e}");
        std::process::exit(1);
    }
}
