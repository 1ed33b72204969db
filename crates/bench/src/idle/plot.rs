//! The SVG that `spool-bench idle --sweep … --plot FILE.svg` draws (issue 19 asks for
//! RSS and delivery latency against subscriber count, produced by the bench).
//!
//! Drawn with `plotters`' SVG backend and no font feature: the SVG holds `<text>`
//! elements that the viewer renders, and plotters only estimates their extent, so no
//! font file, fontconfig or FreeType is needed to build or to draw. Three panels share
//! the x axis (subscribers): the server's RSS with N idle subscribers and after they all
//! closed; RSS per idle subscriber against the ≤ 8 KiB goal; and the hot session's
//! latencies (first delta after the prompt, and delivery: receive − model write).

use super::args::{IdleArgs, Point, Transport};
use anyhow::{Result, bail};
use plotters::coord::Shift;
use plotters::prelude::*;
use std::path::Path;

/// The goal for one idle subscriber, in KiB.
const GOAL_KIB: f64 = 8.0;

pub fn idle(path: &Path, args: &IdleArgs, points: &[Point]) -> Result<()> {
    if points.is_empty() {
        bail!("nothing to plot");
    }
    let root = SVGBackend::new(path, (900, 1100)).into_drawing_area();
    root.fill(&WHITE)?;
    let title = format!(
        "spool-bench idle: {} sessions, {} subscribers; hot session {} deltas {} ms apart",
        args.sessions,
        match args.transport {
            Transport::Sse => "SSE",
            Transport::Ws => "WebSocket",
        },
        args.deltas,
        args.delay_ms
    );
    let root = root.titled(&title, ("sans-serif", 18))?;
    let panels = root.split_evenly((3, 1));
    let x_max = points.iter().map(|p| p.subscribers).max().unwrap_or(1) as f64 * 1.05;
    let mib = |kib: u64| kib as f64 / 1024.0;

    let rss_max = points.iter().map(|p| mib(p.rss_idle.max(p.rss_after))).fold(0.0, f64::max) * 1.1;
    panel(
        &panels[0],
        SeriesLabelPosition::UpperLeft,
        "server RSS, MiB",
        x_max,
        rss_max,
        &[
            ("with N idle subscribers", BLUE, points.iter().map(|p| (p.subscribers as f64, mib(p.rss_idle))).collect()),
            ("after all N closed", GREEN, points.iter().map(|p| (p.subscribers as f64, mib(p.rss_after))).collect()),
            ("before", BLACK, points.iter().map(|p| (p.subscribers as f64, mib(p.rss_before))).collect()),
        ],
    )?;

    let per_max = points.iter().map(|p| p.per_subscriber).fold(GOAL_KIB, f64::max) * 1.15;
    panel(
        &panels[1],
        SeriesLabelPosition::MiddleRight,
        "server RSS per idle subscriber, KiB",
        x_max,
        per_max,
        &[
            (
                "(RSS with N − before) / N",
                BLUE,
                points.iter().map(|p| (p.subscribers as f64, p.per_subscriber)).collect(),
            ),
            ("goal: 8 KiB", RED, vec![(0.0, GOAL_KIB), (x_max, GOAL_KIB)]),
        ],
    )?;

    let delivery = |f: fn(&crate::latency::Spread) -> f64| -> Vec<(f64, f64)> {
        points.iter().filter_map(|p| Some((p.subscribers as f64, f(p.delivery.as_ref()?)))).collect()
    };
    let series = [
        (
            "first delta after the prompt, p50",
            RGBColor(0, 150, 0),
            points.iter().map(|p| (p.subscribers as f64, p.first_delta.0)).collect(),
        ),
        (
            "first delta after the prompt, p99",
            BLUE,
            points.iter().map(|p| (p.subscribers as f64, p.first_delta.1)).collect(),
        ),
        ("delivery (receive − model write), p50", MAGENTA, delivery(|d| d.p50)),
        ("delivery (receive − model write), p99", RED, delivery(|d| d.p99)),
    ];
    let ms_max = series.iter().flat_map(|(_, _, s)| s.iter().map(|&(_, y)| y)).fold(1.0, f64::max) * 1.15;
    panel(&panels[2], SeriesLabelPosition::UpperLeft, "hot session latency, ms", x_max, ms_max, &series)?;
    root.present()?;
    Ok(())
}

/// A line's legend, colour and points.
pub(crate) type Series<'a> = (&'a str, RGBColor, Vec<(f64, f64)>);

/// One chart: lines with their points, and a legend where it hides none of them.
pub(crate) fn panel(
    area: &DrawingArea<SVGBackend, Shift>,
    legend: SeriesLabelPosition,
    y_desc: &str,
    x_max: f64,
    y_max: f64,
    series: &[Series],
) -> Result<()> {
    let mut chart = ChartBuilder::on(area)
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..x_max, 0.0..y_max)?;
    chart
        .configure_mesh()
        .x_desc("subscribers")
        .y_desc(y_desc)
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_label_formatter(&|y| format!("{y:.1}"))
        .draw()?;
    for (label, color, points) in series {
        let color = *color;
        chart
            .draw_series(LineSeries::new(points.iter().copied(), color.stroke_width(2)))?
            .label(*label)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2)));
        chart.draw_series(points.iter().map(|&p| Circle::new(p, 3, color.filled())))?;
    }
    chart.configure_series_labels().position(legend).background_style(WHITE.mix(0.85)).border_style(BLACK).draw()?;
    Ok(())
}
