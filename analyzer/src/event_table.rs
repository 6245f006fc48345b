//! The full event table (`--events out.parquet`): events are written as
//! Parquet row groups while the trace runs, so memory stays bounded whatever
//! the event count (the whole table used to be held until the end: 37 M
//! events took 3.2 GB).

use std::path::Path;

use crate::error::Result;
use memtrace_abi::{Event, LayerInfo};
use polars::prelude::*;

use memtrace_abi::Analysis;
use memtrace_io::output::{write_atomically, AtomicFile};

/// Events per Parquet row group: the most [`EventTable`] holds at once.
pub const ROW_GROUP_EVENTS: usize = 1 << 18;

/// Event columns not written yet.
#[derive(Default)]
struct Columns {
    /// Index into the table's layer names.
    layer: Vec<u32>,
    t: Vec<u64>,
    seq: Vec<u64>,
    pc: Vec<u64>,
    buffer: Vec<u32>,
    offset: Vec<u32>,
    size: Vec<u32>,
    kind: Vec<&'static str>,
}

impl Columns {
    fn len(&self) -> usize {
        self.t.len()
    }

    /// The columns as a frame, leaving them empty.
    fn take_frame(&mut self, layer_names: &[String]) -> Result<DataFrame> {
        let c = std::mem::take(self);
        let names: Vec<&str> = c
            .layer
            .iter()
            .map(|&i| layer_names[i as usize].as_str())
            .collect();
        Ok(df!(
            "layer" => names,
            "t" => c.t,
            "seq" => c.seq,
            "pc" => c.pc,
            "buffer" => c.buffer,
            "offset" => c.offset,
            "size" => c.size,
            "kind" => c.kind,
        )?)
    }
}

/// The event table: collected in memory ([`EventTable::default`],
/// [`EventTable::into_frame`]), or streamed to a Parquet file
/// ([`EventTable::streaming`], [`EventTable::finish`]) one row group of
/// [`ROW_GROUP_EVENTS`] at a time.
#[derive(Default)]
pub struct EventTable {
    layer_names: Vec<String>,
    columns: Columns,
    /// Events already written.
    written: usize,
    sink: Option<Sink>,
    /// The first write error; the trace goes on and [`EventTable::finish`]
    /// reports it.
    error: Option<crate::Error>,
}

struct Sink {
    file: AtomicFile,
    writer: polars::io::parquet::write::BatchedWriter<std::fs::File>,
}

impl Analysis for EventTable {
    fn layer_begin(&mut self, layer: &LayerInfo) {
        self.layer_names.push(layer.name.clone());
    }

    fn events(&mut self, events: &[Event]) {
        let layer = self.layer_names.len().saturating_sub(1) as u32;
        for e in events {
            self.columns.layer.push(layer);
            self.columns.t.push(e.t);
            self.columns.seq.push(e.seq);
            self.columns.pc.push(e.pc);
            self.columns.buffer.push(e.buffer);
            self.columns.offset.push(e.offset);
            self.columns.size.push(e.size);
            self.columns.kind.push(e.kind.name());
        }
        if self.sink.is_some() && self.columns.len() >= ROW_GROUP_EVENTS {
            self.flush();
        }
    }
}

/// The table's schema: the event fields of docs/protocol.md (events) plus
/// the layer name.
fn schema() -> Schema {
    Schema::from_iter([
        Field::new("layer".into(), DataType::String),
        Field::new("t".into(), DataType::UInt64),
        Field::new("seq".into(), DataType::UInt64),
        Field::new("pc".into(), DataType::UInt64),
        Field::new("buffer".into(), DataType::UInt32),
        Field::new("offset".into(), DataType::UInt32),
        Field::new("size".into(), DataType::UInt32),
        Field::new("kind".into(), DataType::String),
    ])
}

impl EventTable {
    /// A table that writes its events to `path` as Parquet while they
    /// arrive; nothing is in place before [`EventTable::finish`].
    pub fn streaming(path: &Path) -> Result<EventTable> {
        let file = AtomicFile::create(path)?;
        // Encoded on this thread: parallel encoding's worker threads keep
        // their own allocator arenas, which grew with the event count.
        let writer = ParquetWriter::new(file.handle()?)
            .set_parallel(false)
            .batched(&schema())?;
        Ok(EventTable {
            sink: Some(Sink { file, writer }),
            ..EventTable::default()
        })
    }

    /// Number of events collected or written.
    pub fn len(&self) -> usize {
        self.written + self.columns.len()
    }

    /// Whether no event was collected.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Events held in memory, not written yet.
    pub fn buffered(&self) -> usize {
        self.columns.len()
    }

    /// Writes the buffered events as a row group.
    fn flush(&mut self) {
        if self.error.is_some() || self.columns.len() == 0 {
            return;
        }
        let Some(sink) = self.sink.as_mut() else {
            return;
        };
        let n = self.columns.len();
        let result = self
            .columns
            .take_frame(&self.layer_names)
            .and_then(|frame| Ok(sink.writer.write_batch(&frame)?));
        match result {
            Ok(()) => self.written += n,
            Err(e) => self.error = Some(e),
        }
    }

    /// Writes the last row group and the footer and puts the file in place
    /// (streaming tables); the first write error, naming the file.
    pub fn finish(mut self) -> Result<()> {
        self.flush();
        let Some(sink) = self.sink.take() else {
            return Ok(());
        };
        let path = sink.file.path().to_owned();
        let named =
            |e: crate::Error| crate::Error::Invalid(format!("writing {}: {e}", path.display()));
        if let Some(e) = self.error.take() {
            return Err(named(e));
        }
        sink.writer.finish().map_err(|e| named(e.into()))?;
        Ok(sink.file.commit()?)
    }

    /// The collected events as a frame (in-memory tables).
    pub fn into_frame(mut self) -> Result<DataFrame> {
        self.columns.take_frame(&self.layer_names)
    }

    /// Writes the collected table as Parquet, atomically.
    pub fn write_parquet(self, path: &Path) -> Result<()> {
        let mut frame = self.into_frame()?;
        write_atomically(path, |out| {
            ParquetWriter::new(out).finish(&mut frame)?;
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use memtrace_abi::AccessKind;

    fn event(i: u64) -> Event {
        Event {
            t: i,
            seq: i,
            pc: 0x0800_0000 + i,
            buffer: (i % 3) as u32,
            offset: (i % 4096) as u32,
            size: 1,
            kind: if i.is_multiple_of(2) {
                AccessKind::Load
            } else {
                AccessKind::Store
            },
        }
    }

    #[test]
    fn a_streamed_table_holds_at_most_one_row_group_and_writes_every_event() {
        // 37 M events were 3.2 GB held until the end.
        let dir = std::env::temp_dir().join(format!("memtrace-events-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("events.parquet");
        let mut table = EventTable::streaming(&path).unwrap();
        let batch = 8192u64;
        let total = 3 * ROW_GROUP_EVENTS as u64 + 12_345;
        let mut next = 0;
        for (l, name) in ["first", "second"].iter().enumerate() {
            table.layer_begin(&LayerInfo {
                index: l,
                name: name.to_string(),
                op: "relu".into(),
                params: String::new(),
                spec: None,
            });
            let end = if l == 0 { total / 2 } else { total };
            while next < end {
                let n = batch.min(end - next);
                let events: Vec<Event> = (next..next + n).map(event).collect();
                table.events(&events);
                next += n;
                assert!(
                    table.buffered() < ROW_GROUP_EVENTS + batch as usize,
                    "{} events held",
                    table.buffered()
                );
            }
        }
        assert_eq!(table.len() as u64, total);
        assert!(!path.exists(), "nothing is in place before finish");
        table.finish().unwrap();
        let file = std::fs::File::open(&path).unwrap();
        let frame = ParquetReader::new(file).finish().unwrap();
        assert_eq!(frame.height() as u64, total);
        let t = frame.column("t").unwrap().u64().unwrap();
        let pc = frame.column("pc").unwrap().u64().unwrap();
        let kind = frame.column("kind").unwrap().str().unwrap();
        let layer = frame.column("layer").unwrap().str().unwrap();
        for i in [0, 1, total / 2 - 1, total / 2, total - 1] {
            let e = event(i);
            let row = i as usize;
            assert_eq!(t.get(row), Some(e.t));
            assert_eq!(pc.get(row), Some(e.pc));
            assert_eq!(kind.get(row), Some(e.kind.name()));
            let want = if i < total / 2 { "first" } else { "second" };
            assert_eq!(layer.get(row), Some(want), "row {row}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
