//! The full event table (`--events out.parquet`), materialised with polars
//! only when asked for.

use std::path::Path;

use crate::error::Result;
use memtrace_abi::{Event, LayerInfo};
use polars::prelude::*;

use crate::output::write_atomically;
use memtrace_abi::Analysis;

/// Collects every event into columns.
#[derive(Default)]
pub struct EventTable {
    layer_names: Vec<String>,
    layer: Vec<u32>,
    t: Vec<u64>,
    seq: Vec<u64>,
    pc: Vec<u64>,
    buffer: Vec<u32>,
    offset: Vec<u32>,
    size: Vec<u32>,
    kind: Vec<&'static str>,
}

impl Analysis for EventTable {
    fn layer_begin(&mut self, layer: &LayerInfo) {
        self.layer_names.push(layer.name.clone());
    }

    fn events(&mut self, events: &[Event]) {
        let layer = self.layer_names.len().saturating_sub(1) as u32;
        for e in events {
            self.layer.push(layer);
            self.t.push(e.t);
            self.seq.push(e.seq);
            self.pc.push(e.pc);
            self.buffer.push(e.buffer);
            self.offset.push(e.offset);
            self.size.push(e.size);
            self.kind.push(e.kind.name());
        }
    }
}

impl EventTable {
    /// Number of events collected.
    pub fn len(&self) -> usize {
        self.t.len()
    }

    /// Whether no event was collected.
    pub fn is_empty(&self) -> bool {
        self.t.is_empty()
    }

    /// The event fields of docs/protocol.md (events) plus the layer name.
    pub fn into_frame(self) -> Result<DataFrame> {
        let names: Vec<&str> = self
            .layer
            .iter()
            .map(|&i| self.layer_names[i as usize].as_str())
            .collect();
        let frame = df!(
            "layer" => names,
            "t" => self.t,
            "seq" => self.seq,
            "pc" => self.pc,
            "buffer" => self.buffer,
            "offset" => self.offset,
            "size" => self.size,
            "kind" => self.kind,
        )?;
        Ok(frame)
    }

    /// Writes the table as Parquet, atomically.
    pub fn write_parquet(self, path: &Path) -> Result<()> {
        let mut frame = self.into_frame()?;
        write_atomically(path, |out| {
            ParquetWriter::new(out).finish(&mut frame)?;
            Ok(())
        })
    }
}
