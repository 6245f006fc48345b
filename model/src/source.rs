//! Where a model comes from ([`ModelSource`]: a `.tflite` file or a zoo
//! model) and the model read from there once ([`ModelFile`]): its bytes and
//! everything decoded from them, which every workflow queries instead of
//! reading the bytes again. [`DecodeLog`] counts the decodes.

use std::fmt;
use std::path::{Path, PathBuf};

pub use crate::decodes::DecodeLog;
use crate::graph::{graph_of, TfliteGraph};
use crate::{export, tflite, zoo, Model, ModelError};

/// The scheme of a zoo model's argument, `zoo:NAME`.
const ZOO_SCHEME: &str = "zoo";

/// Where a model comes from: the CLI's model argument, parsed once.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ModelSource {
    /// A `.tflite` file.
    File(PathBuf),
    /// A model of memtrace's zoo (`zoo:NAME`), built from its description;
    /// its weights come from a seed.
    Zoo(String),
}

impl ModelSource {
    /// `arg` as the CLI reads a model argument: `zoo:NAME`, or a path.
    pub fn parse(arg: &str) -> ModelSource {
        match arg.split_once(':') {
            Some((ZOO_SCHEME, name)) => ModelSource::Zoo(name.to_owned()),
            _ => ModelSource::File(PathBuf::from(arg)),
        }
    }

    /// [`parse`](Self::parse), except that a file of that name wins: `run`
    /// takes a program or a model, and a path may look like `zoo:NAME`.
    pub fn parse_existing(arg: &Path) -> ModelSource {
        match arg.to_str().map(ModelSource::parse) {
            Some(zoo @ ModelSource::Zoo(_)) if !arg.exists() => zoo,
            _ => ModelSource::File(arg.to_owned()),
        }
    }

    /// The file, for a file.
    pub fn path(&self) -> Option<&Path> {
        match self {
            ModelSource::File(p) => Some(p),
            ModelSource::Zoo(_) => None,
        }
    }

    /// Whether the model is built from the zoo (it has no file to copy).
    pub fn is_zoo(&self) -> bool {
        matches!(self, ModelSource::Zoo(_))
    }

    /// The model's name: the file stem, or the zoo name.
    pub fn name(&self) -> String {
        match self {
            ModelSource::File(p) => p
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_else(|| "model".into()),
            ModelSource::Zoo(name) => name.clone(),
        }
    }

    /// The last part of the argument: the file name, or `zoo:NAME`.
    pub fn short(&self) -> String {
        match self {
            ModelSource::File(p) => p
                .file_name()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_else(|| p.display().to_string()),
            ModelSource::Zoo(_) => self.to_string(),
        }
    }

    /// memtrace's model of the source: a zoo model as described, a file as
    /// [`tflite::import_file`] reads it (every operator modelled).
    pub fn load(&self) -> Result<Model, ModelError> {
        match self {
            ModelSource::Zoo(name) => zoo::build(name),
            ModelSource::File(p) => tflite::import_file(p),
        }
    }

    /// The `.tflite` bytes of the source: a file's bytes as they are (read
    /// once, bounded), a zoo model's export with weights from `seed`.
    pub fn bytes(&self, seed: u64) -> Result<Vec<u8>, ModelError> {
        match self {
            ModelSource::File(p) => tflite::read_model_file(p),
            ModelSource::Zoo(name) => {
                export::to_tflite(&export::materialize(&zoo::build(name)?, seed))
            }
        }
    }
}

impl fmt::Display for ModelSource {
    /// As the user wrote it: the path, or `zoo:NAME`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ModelSource::File(p) => write!(f, "{}", p.display()),
            ModelSource::Zoo(name) => write!(f, "{ZOO_SCHEME}:{name}"),
        }
    }
}

impl std::str::FromStr for ModelSource {
    type Err = std::convert::Infallible;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(ModelSource::parse(s))
    }
}

/// In reports, as the user wrote it ([`Display`](fmt::Display)).
impl serde::Serialize for ModelSource {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for ModelSource {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(ModelSource::parse(&String::deserialize(d)?))
    }
}

/// Loads `MODEL.tflite` or `zoo:NAME` (the CLI's model argument).
pub fn load(arg: &str) -> Result<Model, ModelError> {
    ModelSource::parse(arg).load()
}

/// A model read once: the `.tflite` bytes as given and what was decoded
/// from them in one pass — the graph TFLM sees, memtrace's model of it, the
/// offline plan it carries and who made that plan.
#[derive(Clone, Debug)]
pub struct ModelFile {
    /// Where it came from.
    pub source: ModelSource,
    /// The seed of a zoo model's weights (and of seeded inputs).
    pub seed: u64,
    /// The bytes as given.
    pub given: Vec<u8>,
    /// The given bytes without their offline plan (`None`: they carry
    /// none): what TFLM's own planner lays out.
    stripped: Option<Vec<u8>>,
    /// Subgraph 0 as TFLM reads it.
    pub graph: TfliteGraph,
    /// memtrace's model: the zoo's description, or the file with every
    /// operator memtrace does not model as an opaque node
    /// ([`tflite::import_for_tflm`]); or why memtrace cannot model the file
    /// (TFLM may still run it: `run` does).
    model: Result<Model, String>,
    /// The `OfflineMemoryAllocation` offsets the model carries.
    pub offline: Option<Vec<i64>>,
    /// The text of the `memtrace_plan` entry describing that plan, if any.
    pub plan_note: Option<Vec<u8>>,
    /// The whole model as decoded, without that plan: what a plan is
    /// written into ([`ModelFile::with_offline`]).
    whole: crate::schema::tflite::Model,
}

impl ModelFile {
    /// Reads `source` (a zoo model with weights from `seed`) and decodes it
    /// once.
    pub fn open(source: &ModelSource, seed: u64) -> Result<ModelFile, ModelError> {
        ModelFile::decode(source, seed, source.bytes(seed)?)
    }

    /// Decodes `given`, the bytes of `source` (with weights from `seed`),
    /// once.
    pub fn decode(
        source: &ModelSource,
        seed: u64,
        given: Vec<u8>,
    ) -> Result<ModelFile, ModelError> {
        let (root, mut whole) = tflite::verified_root(&given)?;
        let graph = graph_of(root)?;
        let model = match source {
            ModelSource::Zoo(name) => Ok(zoo::build(name)?),
            ModelSource::File(_) => {
                tflite::model_of(&source.name(), root, true).map_err(|e| e.to_string())
            }
        };
        let offline = tflite::offline_of(root)?;
        let plan_note = tflite::metadata_of(root, tflite::PLAN_METADATA)?;
        let stripped = (offline.is_some()
            && tflite::remove_entries(
                &mut whole,
                &[tflite::OFFLINE_METADATA, tflite::PLAN_METADATA],
            ))
        .then(|| tflite::encode(&whole));
        Ok(ModelFile {
            source: source.clone(),
            seed,
            given,
            stripped,
            graph,
            model,
            offline,
            plan_note,
            whole,
        })
    }

    /// The bytes TFLM's own plan starts from: the given bytes without the
    /// offline plan they carried.
    pub fn without_offline(&self) -> &[u8] {
        self.stripped.as_deref().unwrap_or(&self.given)
    }

    /// memtrace's model of the bytes as TFLM reads them, with their
    /// constant data: a file's [`model`](Self::model); for a zoo model,
    /// whose description holds no weights, its export imported (decoded a
    /// second time: a zoo model has no file to read once).
    pub fn imported(&self) -> Result<std::borrow::Cow<'_, Model>, ModelError> {
        Ok(match self.source {
            ModelSource::Zoo(_) => std::borrow::Cow::Owned(tflite::import_for_tflm(
                &self.name(),
                self.without_offline(),
            )?),
            ModelSource::File(_) => std::borrow::Cow::Borrowed(self.model()?),
        })
    }

    /// memtrace's model of the file, or why memtrace cannot model it.
    pub fn model(&self) -> Result<&Model, ModelError> {
        self.model
            .as_ref()
            .map_err(|why| ModelError::Invalid(why.clone()))
    }

    /// The model without the offline plan it carried, with `offsets` as its
    /// plan (and `note` as its `memtrace_plan` entry): what
    /// [`tflite::emit_offline_noted`] writes of
    /// [`without_offline`](Self::without_offline), from the decode already
    /// made.
    pub fn with_offline(
        &self,
        offsets: &[i64],
        note: Option<&[u8]>,
    ) -> Result<tflite::EmitReport, ModelError> {
        tflite::emit_into(self.whole.clone(), offsets, note)
    }

    /// The model's name ([`ModelSource::name`]).
    pub fn name(&self) -> String {
        self.source.name()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The CLI's text of the zoo model `name`.
    fn zoo_arg(name: &str) -> String {
        format!("{ZOO_SCHEME}:{name}")
    }

    #[test]
    fn a_model_argument_is_a_zoo_name_or_a_path_and_prints_as_given() {
        let zoo = zoo_arg("sakr_cifar10");
        for (arg, source) in [
            (zoo.as_str(), ModelSource::Zoo("sakr_cifar10".into())),
            (
                "/a/b/magic_wand.tflite",
                ModelSource::File("/a/b/magic_wand.tflite".into()),
            ),
            // Another scheme, or none, is a path.
            ("http:x.tflite", ModelSource::File("http:x.tflite".into())),
            (ZOO_SCHEME, ModelSource::File(ZOO_SCHEME.into())),
        ] {
            assert_eq!(ModelSource::parse(arg), source, "{arg}");
            assert_eq!(source.to_string(), arg);
            let json = serde_json::to_string(&source).unwrap();
            assert_eq!(json, format!("\"{arg}\""));
            assert_eq!(serde_json::from_str::<ModelSource>(&json).unwrap(), source);
        }
        assert_eq!(
            ModelSource::parse(&zoo_arg("sakr_cifar10")).name(),
            "sakr_cifar10"
        );
        assert_eq!(
            ModelSource::parse("/a/b/magic_wand.tflite").name(),
            "magic_wand"
        );
        assert_eq!(
            ModelSource::parse("/a/b/magic_wand.tflite").short(),
            "magic_wand.tflite"
        );
    }

    #[test]
    fn run_takes_zoo_name_as_a_zoo_model_unless_it_is_a_file() {
        assert!(ModelSource::parse_existing(Path::new(&zoo_arg("sakr_cifar10"))).is_zoo());
        let dir = std::env::temp_dir().join(format!("memtrace-source-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let named = dir.join(zoo_arg("sakr_cifar10"));
        std::fs::write(&named, b"x").unwrap();
        assert_eq!(
            ModelSource::parse_existing(&named),
            ModelSource::File(named.clone())
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn one_open_is_one_decode_and_gives_what_each_reader_gives() {
        let source = ModelSource::Zoo("sakr_cifar10".into());
        // Seed 5: bytes no other test of this crate decodes.
        let bytes = source.bytes(5).unwrap();
        let log = DecodeLog::start();
        let file = ModelFile::decode(&source, 5, bytes.clone()).unwrap();
        assert_eq!(log.decodes_of(&bytes), 1);
        // Each value against the reader that decodes it on its own.
        assert_eq!(file.graph, crate::graph::read_graph(&bytes).unwrap());
        assert_eq!(file.offline, tflite::read_offline(&bytes).unwrap());
        assert_eq!(file.without_offline(), &bytes[..]);
        assert_eq!(log.decodes_of(&bytes), 3);
        let planned = tflite::emit_offline(&bytes, &vec![-1; file.graph.tensors.len()])
            .unwrap()
            .bytes;
        // (Writing the plan reads its own output back.)
        let before = log.decodes_of(&planned);
        let with_plan = ModelFile::decode(&source, 5, planned.clone()).unwrap();
        assert_eq!(log.decodes_of(&planned) - before, 1);
        assert_eq!(with_plan.offline, tflite::read_offline(&planned).unwrap());
        assert!(with_plan.offline.is_some());
        assert_eq!(
            with_plan.without_offline(),
            tflite::strip_offline(&planned).unwrap().unwrap()
        );
    }
}
