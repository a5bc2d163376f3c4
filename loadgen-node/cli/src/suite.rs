//! `loadgen-node suite`: the suite table as this node knows it, for one
//! round of the rules (docs/operator-guide.md holds its output).

use std::fmt::Write as _;

use crate::benchmarks::{self, Benchmark, Compression, Round, Volume};

/// The flags of `loadgen-node suite`.
#[derive(clap::Args, Debug)]
pub struct SuiteArgs {
    /// The round of the rules: v6.1 (current) or v5.1.
    #[arg(long, value_name = "ROUND", default_value_t = Round::CURRENT)]
    pub rules: Round,
}

/// Prints the table.
pub fn print(args: &SuiteArgs) {
    print!("{}", table(args.rules));
    print!("\n{}", not_run(args.rules));
}

/// The checker's benchmarks of `round` that the official LoadGen 6.0.17
/// does not run, with the reason, as a Markdown table.
pub fn not_run(round: Round) -> String {
    let list = benchmarks::not_run(round);
    if list.is_empty() {
        return format!(
            "Every checker benchmark of the {round} rules is in LoadGen 6.0.17's mlperf.conf.\n"
        );
    }
    let mut out = format!(
        "Checker benchmarks of the {round} rules that LoadGen 6.0.17 does not run:\n\n\
         | checker folder | category | why not |\n|---|---|---|\n"
    );
    for n in list {
        let _ = writeln!(out, "| {} | {} | {} |", n.checker, n.category, n.reason);
    }
    out
}

fn bytes(n: usize) -> String {
    crate::budget::grouped(n as u64)
}

fn volume(v: Option<Volume>) -> String {
    match v {
        None => "no row".into(),
        Some(Volume::Negligible) => "> 0".into(),
        Some(Volume::Elements(n)) => format!("{} x dtype", bytes(n as usize)),
        Some(Volume::Bytes(n)) => format!("{} B", bytes(n as usize)),
    }
}

fn input(b: &Benchmark) -> String {
    b.input
        .iter()
        .map(|t| {
            let dims: Vec<String> = t.shape.iter().map(usize::to_string).collect();
            // `|u1` would end a Markdown cell.
            format!(
                "{} {} [{}]",
                t.name,
                t.dtype.replace('|', "\\|"),
                dims.join("x")
            )
        })
        .collect::<Vec<_>>()
        .join(" + ")
}

/// The table of `round`, as a Markdown table.
pub fn table(round: Round) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "| model | input (per sample) | bytes in | bytes out | data set | tokens | {round}: checker folder | compression | bandwidth in / out | audits |"
    );
    let _ = writeln!(out, "|---|---|---|---|---|---|---|---|---|---|");
    for b in benchmarks::BENCHMARKS {
        let rules = b.rules(round);
        let (checker, compression, bandwidth, audits) = match (rules, b.retired) {
            (_, Some(_)) => ("retired".to_string(), "-".into(), "-".into(), "-".into()),
            (None, None) => (
                format!("not in {round}"),
                "none".into(),
                "-".into(),
                "-".into(),
            ),
            (Some(r), None) => (
                r.checker.join(", "),
                match r.compression {
                    Compression::Lossless => "lossless".to_string(),
                    Compression::None => "none".to_string(),
                },
                format!("{} / {}", volume(r.ingress), volume(r.egress)),
                match r.audits {
                    [] => "none".to_string(),
                    a => a.iter().map(|a| a.name()).collect::<Vec<_>>().join(", "),
                },
            ),
        };
        let name = match b.aliases {
            [] => b.model.to_string(),
            a => format!("{} ({})", b.model, a.join(", ")),
        };
        let _ = writeln!(
            out,
            "| {name} | {} | {} | {} | {} | {} | {checker} | {compression} | {bandwidth} | {audits} |",
            input(b),
            bytes(b.input_bytes()),
            bytes(b.output_bytes),
            bytes(b.total_samples),
            if b.llm { "yes" } else { "no" },
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_model_has_a_row() {
        let t = table(Round::CURRENT);
        assert_eq!(t.lines().count(), benchmarks::BENCHMARKS.len() + 2);
        assert!(
            t.contains("| wan-2.2-t2v-a14b | prompt \\|u1 [256] | 256 | 449,740,800 |"),
            "{t}"
        );
        assert!(t.contains("> 0 / 224,870,400 x dtype | TEST04 |"), "{t}");
        assert!(table(Round::V5_1).contains("| dlrm-v2 |"));
        assert_eq!(bytes(1000), "1,000");
        assert_eq!(bytes(7), "7");
    }

    #[test]
    fn the_checkers_benchmarks_the_loadgen_does_not_run_are_listed_with_the_reason() {
        let t = not_run(Round::CURRENT);
        for b in ["e2e-rag-qna", "e2e-rag-db", "qwen3.6-27b"] {
            let row = t
                .lines()
                .find(|l| l.starts_with(&format!("| {b} |")))
                .unwrap_or_else(|| panic!("{b}: {t}"));
            assert!(row.contains("not in LoadGen 6.0.17's mlperf.conf"), "{row}");
            assert!(benchmarks::find(b).is_none(), "{b}");
        }
        assert!(not_run(Round::V5_1).starts_with("Every checker benchmark of the v5.1 rules"));
    }

    #[test]
    fn the_operator_guide_holds_the_current_table() {
        let guide = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../docs/operator-guide.md"
        ))
        .unwrap();
        let open = "<!-- loadgen-node suite -->\n";
        let start = guide.find(open).expect("the table's marker") + open.len();
        let end = start + guide[start..].find("<!-- end -->").expect("its end");
        assert!(
            guide[start..end] == format!("{}\n{}", table(Round::CURRENT), not_run(Round::CURRENT)),
            "docs/operator-guide.md: paste the output of `loadgen-node suite` in"
        );
    }
}
