//! Arena-wide memory-access trace of a whole model (the DMO paper's Fig. 2):
//! x = arena offset, y = time (retired instructions, all layers one after
//! the other, downwards), the bytes each layer has declared shaded for the
//! layer's duration, and loads / stores / updates coloured. `memtrace verify
//! --plot` draws the reference run and the plan run side by side on one
//! arena scale.
//!
//! Events are binned online into a grid of at most `COLUMNS × ROWS` cells;
//! when the run grows past the grid's time span, rows are merged pairwise
//! (the span doubles), so memory stays fixed whatever the event count.

use std::path::Path;

use crate::error::{Error, Result};
use memtrace_abi::{AccessKind, Buffer, Event, LayerInfo};
use plotters::coord::Shift;
use plotters::prelude::*;

use crate::plot::{font, render_picture, swatch_legend, Picture};
use memtrace_abi::Analysis;

const COLUMNS: usize = 600;
const ROWS: usize = 700;
const LOAD: RGBColor = RGBColor(214, 39, 40);
const STORE: RGBColor = RGBColor(31, 119, 180);
const UPDATE: RGBColor = RGBColor(44, 160, 44);
const IN_USE: RGBColor = RGBColor(225, 225, 225);

/// One layer's shaded area: time span and arena byte ranges.
#[derive(Clone, Debug)]
struct Span {
    t0: u64,
    t1: u64,
    ranges: Vec<(u64, u64)>,
}

/// The binned trace of one run (an [`Analysis`]).
pub struct ArenaTrace {
    /// Title of the picture, with the sizes it shows: the drawn extent may
    /// be larger than the plan's arena (one scale for runs side by side), so
    /// the title, not the axis, states the plan's own size.
    pub title: String,
    base: u64,
    arena_bytes: u64,
    bytes_per_column: u64,
    /// Instructions per row (a power of two).
    row_span: u64,
    cells: Vec<[u32; 3]>,
    /// Instructions before the current layer.
    t_layer: u64,
    spans: Vec<Span>,
    buffers: Vec<Buffer>,
    total: u64,
}

impl ArenaTrace {
    /// An empty trace of the arena `[base, base + arena_bytes)` (guest addresses).
    pub fn new(title: impl Into<String>, base: u64, arena_bytes: u64) -> Self {
        ArenaTrace {
            title: title.into(),
            base,
            arena_bytes: arena_bytes.max(1),
            bytes_per_column: arena_bytes.max(1).div_ceil(COLUMNS as u64),
            row_span: 1024,
            cells: vec![[0; 3]; COLUMNS * ROWS],
            t_layer: 0,
            spans: Vec::new(),
            buffers: Vec::new(),
            total: 0,
        }
    }

    fn fold(&mut self) {
        for r in 0..ROWS / 2 {
            for c in 0..COLUMNS {
                let a = self.cells[(2 * r) * COLUMNS + c];
                let b = self.cells[(2 * r + 1) * COLUMNS + c];
                self.cells[r * COLUMNS + c] = [a[0] + b[0], a[1] + b[1], a[2] + b[2]];
            }
        }
        for cell in &mut self.cells[(ROWS / 2) * COLUMNS..] {
            *cell = [0; 3];
        }
        self.row_span *= 2;
    }
}

impl Analysis for ArenaTrace {
    fn layer_begin(&mut self, _layer: &LayerInfo) {
        self.buffers.clear();
    }

    fn buffer(&mut self, b: &Buffer) {
        self.buffers.push(b.clone());
    }

    fn events(&mut self, events: &[Event]) {
        for e in events {
            let Some(b) = self.buffers.iter().find(|b| b.id == e.buffer) else {
                continue;
            };
            let addr = b.base + e.offset as u64;
            if addr < self.base || addr >= self.base + self.arena_bytes {
                continue;
            }
            let t = self.t_layer + e.t;
            while t / self.row_span >= ROWS as u64 {
                self.fold();
            }
            let row = (t / self.row_span) as usize;
            let col = (((addr - self.base) / self.bytes_per_column) as usize).min(COLUMNS - 1);
            let k = match e.kind {
                AccessKind::Load => 0,
                AccessKind::Store => 1,
                AccessKind::Update => 2,
            };
            self.cells[row * COLUMNS + col][k] += 1;
        }
    }

    fn layer_end(&mut self, instructions: u64) {
        let ranges = self
            .buffers
            .iter()
            .filter(|b| b.base >= self.base && b.base < self.base + self.arena_bytes)
            .map(|b| (b.base - self.base, b.base - self.base + b.size as u64))
            .collect();
        self.spans.push(Span {
            t0: self.t_layer,
            t1: self.t_layer + instructions,
            ranges,
        });
        self.t_layer += instructions;
        self.total = self.t_layer;
    }
}

/// Draws `runs` side by side (one arena scale) into a `.png` or `.svg`.
pub fn render(runs: &[&ArenaTrace], path: &Path) -> Result<()> {
    let size = (700 * runs.len() as u32, 900);
    render_picture(path, size, &SideBySide(runs))
}

/// Runs drawn next to each other on one arena scale.
struct SideBySide<'a>(&'a [&'a ArenaTrace]);

impl Picture for SideBySide<'_> {
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<()> {
        draw(self.0, root)
    }
}

fn draw<DB: DrawingBackend>(runs: &[&ArenaTrace], root: &DrawingArea<DB, Shift>) -> Result<()> {
    root.fill(&WHITE)
        .map_err(|e| Error::Drawing(e.to_string()))?;
    let x_max = runs.iter().map(|r| r.arena_bytes).max().unwrap_or(1);
    let areas = root.split_evenly((1, runs.len().max(1)));
    for (run, area) in runs.iter().zip(areas) {
        draw_run(run, x_max, &area)?;
    }
    Ok(())
}

fn draw_run<DB: DrawingBackend>(
    run: &ArenaTrace,
    x_max: u64,
    area: &DrawingArea<DB, Shift>,
) -> Result<()> {
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| Error::Drawing(e.to_string());
    let family = font();
    let t_max = run.total.max(1);
    let mut chart = ChartBuilder::on(area)
        .caption(&run.title, (family, 16))
        .margin(10)
        .x_label_area_size(36)
        .y_label_area_size(80)
        .build_cartesian_2d(0..x_max, -(t_max as i64)..0i64)
        .map_err(err)?;
    chart
        .configure_mesh()
        .disable_mesh()
        .x_desc("arena offset (bytes)")
        .y_desc("instruction (time runs down)")
        .y_label_formatter(&|v| format!("{}", -v))
        .label_style((family, 12))
        .axis_desc_style((family, 13))
        .draw()
        .map_err(err)?;
    chart
        .draw_series(run.spans.iter().flat_map(|s| {
            s.ranges.iter().map(move |&(a, b)| {
                Rectangle::new([(a, -(s.t0 as i64)), (b, -(s.t1 as i64))], IN_USE.filled())
            })
        }))
        .map_err(err)?;
    let bpc = run.bytes_per_column;
    let rs = run.row_span;
    chart
        .draw_series(run.cells.iter().enumerate().filter_map(|(i, c)| {
            let colour = if c[2] > 0 && c[2] >= c[1] && c[2] >= c[0] {
                UPDATE
            } else if c[1] > 0 && c[1] >= c[0] {
                STORE
            } else if c[0] > 0 {
                LOAD
            } else {
                return None;
            };
            let (row, col) = ((i / COLUMNS) as u64, (i % COLUMNS) as u64);
            Some(Rectangle::new(
                [
                    (col * bpc, -((row * rs).min(t_max) as i64)),
                    (
                        ((col + 1) * bpc).min(x_max),
                        -(((row + 1) * rs).min(t_max) as i64),
                    ),
                ],
                colour.filled(),
            ))
        }))
        .map_err(err)?;
    let swatches = [
        ("load", LOAD),
        ("store", STORE),
        ("update", UPDATE),
        ("in use", IN_USE),
    ];
    swatch_legend(&mut chart, &swatches, SeriesLabelPosition::LowerRight).map_err(err)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn folding_keeps_every_event() {
        let mut a = ArenaTrace::new("t", 0, 1000);
        a.layer_begin(&LayerInfo {
            index: 0,
            name: "l".into(),
            op: "x".into(),
            params: String::new(),
            spec: None,
        });
        a.buffer(&Buffer {
            id: 0,
            role: memtrace_abi::Role::Output,
            name: "o".into(),
            base: 0,
            size: 1000,
            elem_size: 1,
        });
        let evs: Vec<Event> = (0..5000u64)
            .map(|i| Event {
                t: i * 1000,
                seq: i,
                pc: 0,
                buffer: 0,
                offset: (i % 1000) as u32,
                size: 1,
                kind: AccessKind::Store,
            })
            .collect();
        a.events(&evs);
        a.layer_end(5_000_000);
        let n: u32 = a.cells.iter().map(|c| c[1]).sum();
        assert_eq!(n, 5000);
        assert!(a.row_span * ROWS as u64 >= 5_000_000);
        let dir = std::env::temp_dir().join(format!("memtrace-arena-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let png = dir.join("a.png");
        render(&[&a, &a], &png).unwrap();
        assert!(std::fs::metadata(&png).unwrap().len() > 1000);
    }
}
