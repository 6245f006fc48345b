//! Pictures drawn by memtrace. Text uses an embedded DejaVu Sans, so no
//! system font or fontconfig is needed at run time.

pub mod trace;

use std::sync::OnceLock;

use plotters::style::FontStyle;

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
