//! A PNG of a [`BenchReport`]: GB/s per size, one line per layout.
//!
//! Drawn with plotters' bitmap backend. Text uses a font shipped in the crate
//! (`assets/fonts/DejaVuSans-ascii.ttf`, DejaVu Sans cut to printable ASCII, 10 KB)
//! through plotters' `ab_glyph` renderer, so no system font (or fontconfig) is needed.

use std::path::Path;
use std::sync::OnceLock;

use plotters::prelude::*;
use plotters::style::{register_font, FontStyle};

use super::reductions::{BenchReport, BenchRow};
use crate::error::{Error, Result};

static FONT: &[u8] = include_bytes!("../../assets/fonts/DejaVuSans-ascii.ttf");

fn font() -> Result<()> {
    static REGISTERED: OnceLock<bool> = OnceLock::new();
    let ok =
        *REGISTERED.get_or_init(|| register_font("sans-serif", FontStyle::Normal, FONT).is_ok());
    if ok {
        Ok(())
    } else {
        Err(Error::io(
            "plot",
            std::io::Error::other("the bundled font failed to load"),
        ))
    }
}

/// Writes the report as a PNG line chart to `path` (960 x 540).
pub fn plot_png(report: &BenchReport, path: &Path) -> Result<()> {
    font()?;
    if report.rows.is_empty() {
        return Err(Error::InvalidArgument(
            "plot: the report has no rows".into(),
        ));
    }
    let err = |e: &dyn std::fmt::Display| {
        Error::io(
            format!("plot {}", path.display()),
            std::io::Error::other(e.to_string()),
        )
    };
    let mut sizes: Vec<(usize, usize)> = Vec::new();
    let mut layouts: Vec<&str> = Vec::new();
    for r in &report.rows {
        if !sizes.contains(&(r.rows, r.cols)) {
            sizes.push((r.rows, r.cols));
        }
        if !layouts.contains(&r.layout.as_str()) {
            layouts.push(&r.layout);
        }
    }
    let labels: Vec<String> = sizes.iter().map(|(m, n)| format!("{m}x{n}")).collect();
    let top = report
        .rows
        .iter()
        .map(|r| r.gb_per_s)
        .filter(|v| v.is_finite())
        .fold(0.0f64, f64::max);
    let top = if top > 0.0 { top * 1.15 } else { 1.0 };

    let root = BitMapBackend::new(path, (960, 540)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let caption = format!(
        "Row sums by reduction layout: {} on {}{}",
        report.dtype,
        report.target,
        if report.target == "emulated-metal" {
            " (emulated: not GPU timings)"
        } else {
            ""
        }
    );
    let n = sizes.len() as i32;
    let mut chart = ChartBuilder::on(&root)
        .caption(caption, ("sans-serif", 22))
        .margin(16)
        .x_label_area_size(44)
        .y_label_area_size(64)
        .build_cartesian_2d((0..n - 1).into_segmented(), 0f64..top)
        .map_err(|e| err(&e))?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_desc("rows x cols")
        .y_desc("GB/s (median)")
        .x_labels(sizes.len())
        .x_label_formatter(&|v| match v {
            SegmentValue::CenterOf(i) | SegmentValue::Exact(i) => {
                labels.get(*i as usize).cloned().unwrap_or_default()
            }
            SegmentValue::Last => String::new(),
        })
        .label_style(("sans-serif", 14))
        .axis_desc_style(("sans-serif", 16))
        .draw()
        .map_err(|e| err(&e))?;
    for (li, layout) in layouts.iter().enumerate() {
        let color = Palette99::pick(li).to_rgba();
        let points: Vec<(SegmentValue<i32>, f64)> = report
            .rows
            .iter()
            .filter(|r: &&BenchRow| r.layout == *layout && r.gb_per_s.is_finite())
            .filter_map(|r| {
                let i = sizes.iter().position(|s| *s == (r.rows, r.cols))?;
                Some((SegmentValue::CenterOf(i as i32), r.gb_per_s))
            })
            .collect();
        chart
            .draw_series(LineSeries::new(points.clone(), color.stroke_width(2)))
            .map_err(|e| err(&e))?
            .label(*layout)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
        chart
            .draw_series(
                points
                    .into_iter()
                    .map(|p| Circle::new(p, 4, color.filled())),
            )
            .map_err(|e| err(&e))?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .label_font(("sans-serif", 14))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(rows: usize, layout: &str, gb_per_s: f64) -> BenchRow {
        BenchRow {
            rows,
            cols: 1024,
            layout: layout.into(),
            dtype: "float32".into(),
            target: "cpu-executor".into(),
            device: "test".into(),
            median_s: 1e-4,
            gb_per_s,
            max_abs_err: 0.0,
            tolerance: 1e-3,
            ok: true,
            reps: 1,
        }
    }

    #[test]
    fn writes_a_png_with_text_and_lines() -> Result<()> {
        let report = BenchReport {
            target: "cpu-executor".into(),
            device: "test".into(),
            dtype: "float32".into(),
            notes: vec![],
            rows: vec![
                row(128, "DEFAULT", 3.0),
                row(128, "TILED", 1.5),
                row(256, "DEFAULT", 4.0),
                row(256, "TILED", f64::NAN),
            ],
        };
        let path = std::env::temp_dir().join(format!("tm-plot-{}.png", std::process::id()));
        plot_png(&report, &path)?;
        let bytes = std::fs::read(&path)?;
        std::fs::remove_file(&path)?;
        assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
        // A blank 960x540 white PNG compresses to ~2 KB; text, lines and markers add more.
        assert!(bytes.len() > 8_000, "{} bytes", bytes.len());
        let empty = BenchReport {
            rows: vec![],
            ..report
        };
        assert!(plot_png(&empty, &path).is_err());
        Ok(())
    }
}
