//! Pictures drawn by memtrace. Text uses an embedded DejaVu Sans, so no
//! system font or fontconfig is needed at run time.

pub mod arena;
pub mod plan;
pub mod trace;

use std::path::Path;
use std::sync::OnceLock;

use crate::error::{Error, Result};
use plotters::coord::ranged1d::Ranged;
use plotters::coord::types::RangedCoordu64;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::FontStyle;

use memtrace_io::output::write_atomically;

/// The font family every memtrace plot uses, registered on first use.
pub fn font() -> &'static str {
    static REGISTERED: OnceLock<()> = OnceLock::new();
    REGISTERED.get_or_init(|| {
        // Only fails on a corrupt font, which the crate does not ship.
        let _ = plotters::style::register_font(
            "sans-serif",
            FontStyle::Normal,
            dejavu::sans::regular(),
        );
    });
    "sans-serif"
}

/// Adds a filled-square legend entry for each `(label, colour)` and draws the
/// legend box: the key of memtrace's event colours in every trace picture.
pub fn swatch_legend<'a, DB, Y>(
    chart: &mut ChartContext<'a, DB, Cartesian2d<RangedCoordu64, Y>>,
    swatches: &[(&str, RGBColor)],
    position: SeriesLabelPosition,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>>
where
    DB: DrawingBackend + 'a,
    Y: Ranged,
    Y::ValueType: 'static,
{
    for &(label, colour) in swatches {
        chart
            .draw_series(std::iter::empty::<Rectangle<(u64, Y::ValueType)>>())?
            .label(label)
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 10, y + 5)], colour.filled()));
    }
    chart
        .configure_series_labels()
        .label_font((font(), 12))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .position(position)
        .draw()
}

/// A picture plotters can draw on any backend.
pub trait Picture {
    /// Draws the picture on `root`.
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<()>;
}

/// Draws `picture` at `size` pixels into `path`, as SVG or PNG by its
/// extension (anything else is an error), written atomically.
pub fn render_picture(path: &Path, size: (u32, u32), picture: &impl Picture) -> Result<()> {
    let svg = is_svg(path)?;
    // Drawn in memory and written like any other output, so that a failed
    // write is reported as one (naming the file), not as a backend error.
    let bytes = if svg {
        let mut text = String::new();
        {
            let root = SVGBackend::with_string(&mut text, size).into_drawing_area();
            picture.draw(&root).map_err(|e| plot_error(path, e))?;
            root.present()
                .map_err(|e| plot_error(path, Error::Drawing(e.to_string())))?;
        }
        text.into_bytes()
    } else {
        let (w, h) = size;
        let mut rgb = vec![0u8; w as usize * h as usize * 3];
        {
            let root = BitMapBackend::with_buffer(&mut rgb, size).into_drawing_area();
            picture.draw(&root).map_err(|e| plot_error(path, e))?;
            root.present()
                .map_err(|e| plot_error(path, Error::Drawing(e.to_string())))?;
        }
        png(&rgb, size).map_err(|e| plot_error(path, e))?
    };
    write_atomically(path, |w| {
        std::io::Write::write_all(w, &bytes)?;
        Ok(())
    })
}

/// Whether the picture file `path` is SVG (`.svg`) or PNG (`.png`);
/// anything else is an error, found before a long run.
pub fn is_svg(path: &Path) -> Result<bool> {
    match path.extension().and_then(|e| e.to_str()) {
        Some("svg") => Ok(true),
        Some("png") => Ok(false),
        _ => Err(Error::Invalid(format!(
            "{}: plot files must end in .png or .svg",
            path.display()
        ))),
    }
}

/// A drawing failure of the picture `path`.
fn plot_error(path: &Path, e: Error) -> Error {
    match e {
        Error::Drawing(message) => Error::Plot {
            path: path.to_owned(),
            message,
        },
        other => other,
    }
}

/// RGB pixels as a PNG file.
fn png(rgb: &[u8], (w, h): (u32, u32)) -> Result<Vec<u8>> {
    let image = image::RgbImage::from_raw(w, h, rgb.to_vec())
        .ok_or_else(|| Error::Drawing("the pixel buffer does not match the size".into()))?;
    let mut out = std::io::Cursor::new(Vec::new());
    image
        .write_to(&mut out, image::ImageOutputFormat::Png)
        .map_err(|e| Error::Drawing(format!("encoding PNG: {e}")))?;
    Ok(out.into_inner())
}
