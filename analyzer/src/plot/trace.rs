//! Fig. 3-style trace pictures: x = instruction, y = byte offset, one panel
//! per input and output buffer, loads / stores / updates in red / blue / green.
//!
//! Events are binned while they stream into a fixed per-pixel count grid whose
//! time bins double in width whenever the layer runs past the grid, so memory
//! stays constant however many millions of events a layer has.
//!
//! With [`TracePlot::with_overlays`], every layer with an input and an output
//! gets the O_s curves of docs/overlap.md as traced: `maxW` (the largest
//! output byte written so far) on the output, `minR` (the lowest input byte
//! read later) and the clobber front `maxW − OB + O_s` at the traced
//! monotone O_s on the input — a model's operators as much as a kernel
//! binary's layers. A layer whose spec is known (a `--job` or a suite layer)
//! also gets the modelled curves: the algorithmic `maxW` and the analytic
//! read bound (eq. 9), placed on the instruction axis by a [`StepClock`].
//! The legend says which curve is traced and which is modelled.

use std::path::Path;

use crate::error::{Error, Result};
use memtrace_abi::{AccessKind, Buffer, Event, LayerInfo, Role};
use plotters::coord::Shift;
use plotters::prelude::*;

use super::{render_picture, swatch_legend, Picture};
use crate::plot::font;
use memtrace_abi::Analysis;
use memtrace_overlap::algorithmic::{algorithmic_curves, Curves, Geometry};
use memtrace_overlap::analytic::windowed_safe_detail;
use memtrace_overlap::empirical::OverlapAccumulator;
use memtrace_overlap::timeline::{StepClock, StepMapping};

const COLUMNS: usize = 640;
const ROWS: usize = 256;
const LOAD: RGBColor = RGBColor(214, 39, 40);
const STORE: RGBColor = RGBColor(31, 119, 180);
const UPDATE: RGBColor = RGBColor(44, 160, 44);
const MIN_R: RGBColor = RGBColor(0, 0, 0);
const MAX_W: RGBColor = RGBColor(0, 0, 0);
const FRONT: RGBColor = RGBColor(148, 103, 189);
const MODELLED: RGBColor = RGBColor(127, 127, 127);
const BOUND: RGBColor = RGBColor(255, 127, 14);
/// Sampled steps of the overlay curves.
const OVERLAY_POINTS: usize = 1000;

/// A drawn cell run: (instruction range, byte range, colour).
type Run = ((u64, u64), (u64, u64), RGBColor);

/// Access counts per (time bin, offset bin) cell and kind.
#[derive(Debug, Clone)]
pub struct Grid {
    /// Instructions per column; doubles when time outruns the grid.
    bin: u64,
    /// Bytes of the buffer.
    span: u64,
    counts: Vec<[u32; 3]>,
}

impl Grid {
    /// An empty grid for a buffer of `span` bytes, one instruction per column.
    pub fn new(span: u64) -> Grid {
        Grid {
            bin: 1,
            span: span.max(1),
            counts: vec![[0; 3]; COLUMNS * ROWS],
        }
    }

    fn row(&self, offset: u64) -> usize {
        ((offset * ROWS as u64) / self.span).min(ROWS as u64 - 1) as usize
    }

    /// Counts one access at instruction `t`.
    pub fn add(&mut self, t: u64, offset: u64, size: u64, kind: AccessKind) {
        while t >= self.bin * COLUMNS as u64 {
            self.fold();
        }
        let col = (t / self.bin) as usize;
        let k = kind_index(kind);
        for row in self.row(offset)..=self.row(offset + size.max(1) - 1) {
            self.counts[row * COLUMNS + col][k] += 1;
        }
    }

    /// Halves the time resolution: columns 2c and 2c+1 become column c.
    fn fold(&mut self) {
        for row in 0..ROWS {
            let base = row * COLUMNS;
            for c in 0..COLUMNS / 2 {
                let (a, b) = (self.counts[base + 2 * c], self.counts[base + 2 * c + 1]);
                self.counts[base + c] = [a[0] + b[0], a[1] + b[1], a[2] + b[2]];
            }
            self.counts[base + COLUMNS / 2..base + COLUMNS].fill([0; 3]);
        }
        self.bin *= 2;
    }

    /// Total accesses of `kind` counted (each access once per row it spans).
    pub fn total(&self, kind: AccessKind) -> u64 {
        let k = kind_index(kind);
        self.counts.iter().map(|c| c[k] as u64).sum()
    }

    /// Cells as (instruction range, byte range, colour), merged along time.
    fn runs(&self) -> Vec<Run> {
        let mut out = Vec::new();
        for row in 0..ROWS {
            let y0 = row as u64 * self.span / ROWS as u64;
            let y1 = ((row + 1) as u64 * self.span / ROWS as u64).max(y0 + 1);
            let mut open: Option<(usize, RGBColor)> = None;
            for col in 0..=COLUMNS {
                let colour = (col < COLUMNS)
                    .then(|| dominant(self.counts[row * COLUMNS + col]))
                    .flatten();
                match (open, colour) {
                    (Some((_, c)), Some(n)) if c == n => {}
                    (prev, next) => {
                        if let Some((start, c)) = prev {
                            out.push((
                                (start as u64 * self.bin, col as u64 * self.bin),
                                (y0, y1),
                                c,
                            ));
                        }
                        open = next.map(|n| (col, n));
                    }
                }
            }
        }
        out
    }
}

fn kind_index(kind: AccessKind) -> usize {
    match kind {
        AccessKind::Load => 0,
        AccessKind::Store => 1,
        AccessKind::Update => 2,
    }
}

fn dominant(c: [u32; 3]) -> Option<RGBColor> {
    // On ties writes win (update over store over load): a read-modify-write
    // cell is shown as the write it ends in, as in the paper's Fig. 3b.
    let (i, &n) = c.iter().enumerate().max_by_key(|(i, n)| (**n, *i))?;
    (n > 0).then_some([LOAD, STORE, UPDATE][i])
}

/// A curve drawn over a panel (minR / maxW / analytic bound), in
/// (instruction, byte offset) coordinates.
#[derive(Debug, Clone)]
pub struct Overlay {
    /// Legend text.
    pub label: String,
    /// Line colour.
    pub colour: RGBColor,
    /// The curve's (instruction, byte offset) points, in instruction order.
    pub points: Vec<(u64, u64)>,
}

/// One buffer's panel.
#[derive(Debug, Clone)]
pub struct Panel {
    /// The buffer the panel shows.
    pub buffer: Buffer,
    /// Access counts of the buffer over time and offset.
    pub grid: Grid,
    /// Curves drawn over the accesses.
    pub overlays: Vec<Overlay>,
}

/// One layer's picture.
#[derive(Debug, Clone)]
pub struct LayerPicture {
    /// The layer the picture shows.
    pub layer: LayerInfo,
    /// Instructions retired inside the layer window (the x range).
    pub instructions: u64,
    /// Panels of the first declared input and the first declared output, in declaration order.
    pub panels: Vec<Panel>,
    /// The traced monotone O_s of the input/output pair, when drawn.
    pub traced_overlap: Option<u64>,
}

/// Streams events of every layer into pictures.
#[derive(Default)]
pub struct TracePlot {
    /// Pictures of the layers seen so far, in run order.
    pub layers: Vec<LayerPicture>,
    /// Panel index by buffer id for the open layer.
    panel_of: Vec<Option<usize>>,
    /// Draw the O_s curves over layers with a spec.
    overlays: bool,
    /// Curves and step clock of the open layer.
    pending: Option<PendingOverlay>,
    /// The traced fronts of the open layer's input and output.
    fronts: Option<Fronts>,
}

/// `minR` and `maxW` as traced, per time bin of the layer (bins double in
/// width like the grid's, so memory stays constant), and the layer's traced
/// O_s for the clobber front.
struct Fronts {
    input: u32,
    output: u32,
    output_bytes: u64,
    /// Instructions per bin.
    bin: u64,
    /// Per bin: the lowest input offset read in it (`u64::MAX`: none).
    min_read: Vec<u64>,
    /// Per bin: the largest output write end in it (0: none).
    max_write_end: Vec<u64>,
    overlap: OverlapAccumulator,
}

impl Fronts {
    fn new(input: &Buffer, output: &Buffer) -> Fronts {
        Fronts {
            input: input.id,
            output: output.id,
            output_bytes: output.size as u64,
            bin: 1,
            min_read: vec![u64::MAX; COLUMNS],
            max_write_end: vec![0; COLUMNS],
            overlap: OverlapAccumulator::new(
                input.id,
                input.size as u64,
                output.id,
                output.size as u64,
            ),
        }
    }

    fn observe(&mut self, events: &[Event]) {
        for e in events {
            while e.t >= self.bin * COLUMNS as u64 {
                self.fold();
            }
            let col = (e.t / self.bin) as usize;
            if e.buffer == self.input && e.kind != AccessKind::Store {
                self.min_read[col] = self.min_read[col].min(e.offset as u64);
            }
            if e.buffer == self.output && e.kind != AccessKind::Load {
                let end = (e.offset + e.size) as u64;
                self.max_write_end[col] = self.max_write_end[col].max(end);
            }
        }
        self.overlap.observe(events);
    }

    fn fold(&mut self) {
        for c in 0..COLUMNS / 2 {
            self.min_read[c] = self.min_read[2 * c].min(self.min_read[2 * c + 1]);
            self.max_write_end[c] = self.max_write_end[2 * c].max(self.max_write_end[2 * c + 1]);
        }
        self.min_read[COLUMNS / 2..].fill(u64::MAX);
        self.max_write_end[COLUMNS / 2..].fill(0);
        self.bin *= 2;
    }

    /// The traced curves: (input overlays, output overlays), and the traced
    /// monotone O_s.
    fn curves(&self) -> (Vec<Overlay>, Vec<Overlay>, u64) {
        let os = self.overlap.result().monotone_bytes;
        let at = |c: usize| c as u64 * self.bin;
        // maxW after bin c: the running maximum.
        let mut max_w = Vec::new();
        let mut m = 0;
        for (c, &w) in self.max_write_end.iter().enumerate() {
            m = m.max(w);
            if m > 0 {
                max_w.push((at(c + 1), m));
            }
        }
        // minR after bin c: the minimum over the later bins.
        let mut min_r = Vec::new();
        let mut r = u64::MAX;
        for c in (0..COLUMNS).rev() {
            if r != u64::MAX {
                min_r.push((at(c + 1), r));
            }
            r = r.min(self.min_read[c]);
        }
        min_r.reverse();
        let front: Vec<(u64, u64)> = max_w
            .iter()
            .filter_map(|&(t, w)| (w + os).checked_sub(self.output_bytes).map(|v| (t, v)))
            .collect();
        let input = vec![
            Overlay {
                label: "minR (traced): lowest input byte read later".into(),
                colour: MIN_R,
                points: min_r,
            },
            Overlay {
                label: format!("clobber front maxW - OB + O_s (traced O_s = {os} B)"),
                colour: FRONT,
                points: front,
            },
        ];
        let output = vec![Overlay {
            label: "maxW (traced): largest output byte written so far".into(),
            colour: MAX_W,
            points: max_w,
        }];
        (input, output, os)
    }
}

struct PendingOverlay {
    curves: Curves,
    clock: Option<StepClock>,
}

impl TracePlot {
    /// A plot that also draws minR / maxW / the clobber front / the analytic
    /// bound over every layer whose spec matches its traced buffers.
    pub fn with_overlays() -> TracePlot {
        TracePlot {
            overlays: true,
            ..TracePlot::default()
        }
    }

    /// Attaches the step clock once both panels exist and match the spec.
    fn arm_clock(&mut self) {
        let (Some(pic), Some(pending)) = (self.layers.last(), self.pending.as_mut()) else {
            return;
        };
        if pending.clock.is_some() {
            return;
        }
        let panel = |role| pic.panels.iter().find(|p| p.buffer.role == role);
        if let (Some(i), Some(o)) = (panel(Role::Input), panel(Role::Output)) {
            if i.buffer.size as u64 == pending.curves.input_bytes
                && o.buffer.size as u64 == pending.curves.output_bytes
            {
                pending.clock = Some(StepClock::new(o.buffer.id, &pending.curves));
            }
        }
    }
}

/// The overlay curves of a finished layer, in (instruction, byte) coordinates.
fn overlay_curves(
    pic: &LayerPicture,
    curves: &Curves,
    clock: &StepClock,
) -> (Vec<Overlay>, Vec<Overlay>) {
    let (times, mapping) = clock.times(curves.total_steps);
    let how = match mapping {
        StepMapping::ByCount => "step k = k-th output write",
        StepMapping::ByFront => "steps placed by write front",
    };
    let at = |f: &dyn Fn(usize) -> Option<u64>| -> Vec<(u64, u64)> {
        (0..curves.points.len())
            .filter_map(|i| f(i).map(|y| (times[i], y)))
            .collect()
    };
    let output = vec![Overlay {
        label: format!("maxW modelled (algorithmic; {how})"),
        colour: MODELLED,
        points: at(&|i| Some(curves.points[i].max_write_end)),
    }];
    let mut input = vec![Overlay {
        label: format!("minR modelled (algorithmic O_s = {} B)", curves.overlap),
        colour: MODELLED,
        points: at(&|i| Some(curves.points[i].min_future_read)),
    }];
    if let Some(spec) = &pic.layer.spec {
        if let Some(d) = windowed_safe_detail(spec) {
            let g = Geometry::of(spec);
            let t = spec.dtype.size() as f64;
            let (a, b) = (d.line.a.to_f64(), d.line.b.to_f64());
            let per_batch = d.ic as u64;
            let image = (g.ih * g.iw * g.id) as f64;
            let ib = curves.input_bytes as f64;
            input.push(Overlay {
                label: format!(
                    "analytic bound on minR modelled, eq. 9 (a = {}, b = {})",
                    d.line.a, d.line.b
                ),
                colour: BOUND,
                points: at(&|i| {
                    let k = curves.points[i].step;
                    let (n, j) = (k / per_batch.max(1), k % per_batch.max(1));
                    let e = a * j as f64 + b + n as f64 * image;
                    Some((e * t).clamp(0.0, ib) as u64)
                }),
            });
        }
    }
    (input, output)
}

impl Analysis for TracePlot {
    fn layer_begin(&mut self, layer: &LayerInfo) {
        self.layers.push(LayerPicture {
            layer: layer.clone(),
            instructions: 0,
            panels: Vec::new(),
            traced_overlap: None,
        });
        self.panel_of.clear();
        self.pending = None;
        self.fronts = None;
        if self.overlays {
            if let Some(curves) = layer
                .spec
                .as_ref()
                .and_then(|s| algorithmic_curves(s, OVERLAY_POINTS))
            {
                self.pending = Some(PendingOverlay {
                    curves,
                    clock: None,
                });
            }
        }
    }

    fn buffer(&mut self, b: &Buffer) {
        let Some(pic) = self.layers.last_mut() else {
            return;
        };
        // The paper's pictures show the first input and the output.
        let wanted = matches!(b.role, Role::Input | Role::Output)
            && !pic.panels.iter().any(|p| p.buffer.role == b.role);
        if !wanted {
            return;
        }
        let id = b.id as usize;
        if self.panel_of.len() <= id {
            self.panel_of.resize(id + 1, None);
        }
        self.panel_of[id] = Some(pic.panels.len());
        pic.panels.push(Panel {
            buffer: b.clone(),
            grid: Grid::new(b.size as u64),
            overlays: Vec::new(),
        });
        if self.overlays && self.fronts.is_none() {
            let panel = |role| pic.panels.iter().find(|p| p.buffer.role == role);
            if let (Some(i), Some(o)) = (panel(Role::Input), panel(Role::Output)) {
                self.fronts = Some(Fronts::new(&i.buffer, &o.buffer));
            }
        }
        self.arm_clock();
    }

    fn events(&mut self, events: &[Event]) {
        let Some(pic) = self.layers.last_mut() else {
            return;
        };
        for e in events {
            if let Some(Some(p)) = self.panel_of.get(e.buffer as usize) {
                pic.panels[*p]
                    .grid
                    .add(e.t, e.offset as u64, e.size as u64, e.kind);
            }
        }
        if let Some(clock) = self.pending.as_mut().and_then(|p| p.clock.as_mut()) {
            clock.observe(events);
        }
        if let Some(fronts) = self.fronts.as_mut() {
            fronts.observe(events);
        }
    }

    fn layer_end(&mut self, instructions: u64) {
        let pending = self.pending.take();
        let fronts = self.fronts.take();
        if let Some(pic) = self.layers.last_mut() {
            pic.instructions = instructions;
            if let Some(fronts) = fronts {
                let (input, output, os) = fronts.curves();
                pic.traced_overlap = Some(os);
                for panel in &mut pic.panels {
                    match panel.buffer.role {
                        Role::Input => panel.overlays.extend(input.iter().cloned()),
                        Role::Output => panel.overlays.extend(output.iter().cloned()),
                        _ => {}
                    }
                }
            }
            if let Some(PendingOverlay {
                curves,
                clock: Some(clock),
            }) = pending
            {
                let (input, output) = overlay_curves(pic, &curves, &clock);
                for panel in &mut pic.panels {
                    match panel.buffer.role {
                        Role::Input => panel.overlays.extend(input.iter().cloned()),
                        Role::Output => panel.overlays.extend(output.iter().cloned()),
                        _ => {}
                    }
                }
            }
        }
    }
}

impl TracePlot {
    /// Draws all layers, one row each, to `.png` or `.svg` (by extension).
    pub fn render(&self, path: &Path) -> Result<()> {
        if self.layers.is_empty() {
            return Err(Error::Invalid(
                "no layer was traced, so there is nothing to plot".into(),
            ));
        }
        let size = (1400u32, 340 * self.layers.len() as u32);
        render_picture(path, size, self)
    }
}

impl Picture for TracePlot {
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<()> {
        root.fill(&WHITE)
            .map_err(|e| Error::Drawing(e.to_string()))?;
        let rows = root.split_evenly((self.layers.len(), 1));
        for (pic, area) in self.layers.iter().zip(rows) {
            let cells = area.split_evenly((1, 2));
            for (panel, cell) in pic.panels.iter().zip(cells) {
                draw_panel(pic, panel, &cell)?;
            }
        }
        Ok(())
    }
}

/// A buffer name short enough for a panel title (a TFLite tensor name can
/// be longer than the panel is wide): its end.
fn shortened(name: &str) -> String {
    const KEEP: usize = 24;
    let chars: Vec<char> = name.chars().collect();
    if chars.len() <= KEEP {
        return name.to_owned();
    }
    let tail: String = chars[chars.len() - KEEP..].iter().collect();
    format!("…{tail}")
}

fn draw_panel<DB: DrawingBackend>(
    pic: &LayerPicture,
    panel: &Panel,
    area: &DrawingArea<DB, Shift>,
) -> Result<()> {
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| Error::Drawing(e.to_string());
    let family = font();
    let x_max = pic.instructions.max(1);
    let y_max = panel.buffer.size.max(1) as u64;
    let name =
        memtrace_abi::selection::display_name(pic.layer.index, &pic.layer.name, &pic.layer.op);
    let title = format!(
        "{name} ({}) - {} `{}`, {} B",
        pic.layer.op,
        panel.buffer.role.name(),
        shortened(&panel.buffer.name),
        panel.buffer.size
    );
    let mut chart = ChartBuilder::on(area)
        .caption(title, (family, 16))
        .margin(8)
        .x_label_area_size(36)
        .y_label_area_size(70)
        .build_cartesian_2d(0..x_max, 0..y_max)
        .map_err(err)?;
    chart
        .configure_mesh()
        .disable_mesh()
        .x_desc("instruction")
        .y_desc("byte offset")
        .label_style((family, 12))
        .axis_desc_style((family, 13))
        .draw()
        .map_err(err)?;
    chart
        .draw_series(
            panel
                .grid
                .runs()
                .into_iter()
                .map(|((x0, x1), (y0, y1), c)| {
                    Rectangle::new([(x0.min(x_max), y0), (x1.min(x_max), y1)], c.filled())
                }),
        )
        .map_err(err)?;
    for overlay in &panel.overlays {
        let colour = overlay.colour;
        // Dashed and thin: the curves often lie right on the traced accesses
        // (they model them), which must stay visible between the dashes.
        chart
            .draw_series(DashedLineSeries::new(
                overlay.points.iter().copied(),
                6,
                5,
                colour.stroke_width(1),
            ))
            .map_err(err)?
            .label(overlay.label.clone())
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 16, y)], colour.stroke_width(2)));
    }
    let swatches: Vec<(&str, RGBColor)> = [
        (AccessKind::Load, LOAD),
        (AccessKind::Store, STORE),
        (AccessKind::Update, UPDATE),
    ]
    .into_iter()
    .filter(|(k, _)| panel.grid.total(*k) > 0)
    .map(|(k, colour)| (k.name(), colour))
    .collect();
    swatch_legend(&mut chart, &swatches, SeriesLabelPosition::UpperLeft).map_err(err)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn folding_keeps_every_count() {
        let mut g = Grid::new(100);
        for t in 0..10_000u64 {
            g.add(t, t % 100, 1, AccessKind::Load);
        }
        assert_eq!(g.total(AccessKind::Load), 10_000);
        assert!(g.bin >= 10_000 / COLUMNS as u64);
    }
}
