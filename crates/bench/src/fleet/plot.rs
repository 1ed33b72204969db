//! The SVG that `spool-bench nodes --sweep … --plot FILE.svg` draws: RSS and latency
//! against the subscriber count across nodes (issue 43), with `idle`'s panel (the SVG
//! backend, no font feature). Panels share the x axis (subscribers over all nodes): a
//! node's RSS with its share of them, RSS per subscriber, the hot session's latencies,
//! and, when the sweep killed a node, how long until its subscribers streamed again.

use super::args::{FleetArgs, Point};
use crate::idle::plot::{Series, panel};
use anyhow::{Result, bail};
use plotters::prelude::*;
use std::path::Path;

pub fn nodes(path: &Path, args: &FleetArgs, points: &[Point]) -> Result<()> {
    if points.is_empty() {
        bail!("nothing to plot");
    }
    let storm = points.iter().any(|p| p.storm_secs.is_some());
    let rows = if storm { 4 } else { 3 };
    let root = SVGBackend::new(path, (900, 370 * rows as u32)).into_drawing_area();
    root.fill(&WHITE)?;
    let title = format!(
        "spool-bench nodes: {} nodes on PostgreSQL + Redis, {} sessions over SSE; hot session {} deltas {} ms apart",
        args.nodes, args.sessions, args.deltas, args.delay_ms
    );
    let root = root.titled(&title, ("sans-serif", 18))?;
    let panels = root.split_evenly((rows, 1));
    let x_max = points.iter().map(|p| p.subscribers).max().unwrap_or(1) as f64 * 1.05;
    let x = |p: &Point| p.subscribers as f64;

    let before =
        |p: &Point| p.per_node.iter().map(|n| n.1).sum::<u64>() as f64 / 1024.0 / p.per_node.len().max(1) as f64;
    let rss: [Series; 2] = [
        (
            "a node with its share of the subscribers (mean)",
            BLUE,
            points.iter().map(|p| (x(p), p.node_rss_mib())).collect(),
        ),
        ("a node before (mean)", BLACK, points.iter().map(|p| (x(p), before(p))).collect()),
    ];
    let rss_max = points.iter().map(Point::node_rss_mib).fold(1.0, f64::max) * 1.15;
    panel(&panels[0], SeriesLabelPosition::UpperLeft, "server RSS per node, MiB", x_max, rss_max, &rss)?;

    let per: [Series; 1] = [(
        "(RSS with − before) / subscribers, all nodes",
        BLUE,
        points.iter().map(|p| (x(p), p.kib_per_subscriber())).collect(),
    )];
    let per_max = points.iter().map(Point::kib_per_subscriber).fold(8.0, f64::max) * 1.15;
    panel(&panels[1], SeriesLabelPosition::LowerRight, "server RSS per subscriber, KiB", x_max, per_max, &per)?;

    let spread = |f: fn(&Point) -> Option<f64>| -> Vec<(f64, f64)> {
        points.iter().filter_map(|p| Some((x(p), f(p)?))).collect()
    };
    let latency: [Series; 4] = [
        ("first delta after the prompt, p50", RGBColor(0, 150, 0), spread(|p| Some(p.first_delta.as_ref()?.p50))),
        ("first delta after the prompt, p99", BLUE, spread(|p| Some(p.first_delta.as_ref()?.p99))),
        ("delivery (receive − model write), p50", MAGENTA, spread(|p| Some(p.delivery.as_ref()?.p50))),
        ("delivery (receive − model write), p99", RED, spread(|p| Some(p.delivery.as_ref()?.p99))),
    ];
    let ms_max = latency.iter().flat_map(|(_, _, s)| s.iter().map(|&(_, y)| y)).fold(1.0, f64::max) * 1.15;
    panel(&panels[2], SeriesLabelPosition::UpperLeft, "hot session latency, ms", x_max, ms_max, &latency)?;

    if storm {
        let back: [Series; 1] = [(
            "kill → every cut subscriber streaming again",
            RED,
            points.iter().filter_map(|p| Some((x(p), p.storm_secs?))).collect(),
        )];
        let s_max = points.iter().filter_map(|p| p.storm_secs).fold(1.0, f64::max) * 1.15;
        panel(&panels[3], SeriesLabelPosition::LowerRight, "node loss: seconds", x_max, s_max, &back)?;
    }
    root.present()?;
    Ok(())
}
