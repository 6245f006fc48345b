//! Named structures' layouts and enumerators' values from a program's
//! DWARF ([`TypeLayouts`]): what it takes to read the program's own data
//! structures from guest memory with the offsets its compiler chose.

use std::collections::HashMap;

use super::{load_dwarf, Reader};
use crate::elf::ElfImage;

/// A structure's layout as the program's DWARF describes it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StructLayout {
    /// `sizeof` the structure (`DW_AT_byte_size`).
    pub size: u64,
    /// Each data member, by name.
    pub members: HashMap<String, Member>,
    /// Byte offset of each direct base class, by its unqualified name.
    pub bases: HashMap<String, u64>,
}

/// A data member of a structure.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Member {
    /// Byte offset in the structure.
    pub offset: u64,
    /// `sizeof` its type, when the DWARF says (through typedefs and
    /// qualifiers): an enumeration may be narrower than an `int`.
    pub size: Option<u64>,
}

impl StructLayout {
    /// Member `name`.
    pub fn member(&self, name: &str) -> Option<Member> {
        self.members.get(name).copied()
    }
}

/// The layouts of named structures and the values of named enumerators,
/// read from a program's DWARF: what it takes to read the program's own
/// data structures from guest memory with the offsets its compiler chose
/// (its headers, its macros, its ABI), never offsets copied from a header.
#[derive(Clone, Debug, Default)]
pub struct TypeLayouts {
    /// By qualified name (`tflite::MicroAllocator`, `TfLiteNode`).
    pub structs: HashMap<String, StructLayout>,
    /// Enumerator values by name (`kTfLiteInt8`).
    pub enumerators: HashMap<String, i64>,
}

impl TypeLayouts {
    /// Finds the first complete definition of each structure (or class, or
    /// typedef of one) named in `structs`, qualified by its namespaces and
    /// enclosing classes, and the value of each enumerator named in
    /// `enumerators`. What the DWARF does not define is absent; an image
    /// without DWARF gives nothing. The walk stops once all are found.
    pub fn load(image: &ElfImage, structs: &[&str], enumerators: &[&str]) -> TypeLayouts {
        let mut found = TypeLayouts::default();
        let Ok(dwarf) = load_dwarf(&image.bytes) else {
            return found;
        };
        let mut wanted = Wanted {
            structs,
            enumerators,
            found: &mut found,
        };
        let mut headers = dwarf.units();
        while let Ok(Some(header)) = headers.next() {
            if wanted.complete() {
                break;
            }
            let Ok(unit) = dwarf.unit(header) else {
                continue;
            };
            let Ok(mut tree) = unit.entries_tree(None) else {
                continue;
            };
            if let Ok(root) = tree.root() {
                // A unit the walk cannot read gives what it read so far.
                let _ = wanted.walk(&dwarf, &unit, root, "", 0);
            }
        }
        found
    }
}

/// Namespaces and classes nested deeper than this are not entered.
const MAX_SCOPE_DEPTH: usize = 32;

/// What [`TypeLayouts::load`] looks for, and what it found so far.
struct Wanted<'a> {
    structs: &'a [&'a str],
    enumerators: &'a [&'a str],
    found: &'a mut TypeLayouts,
}

type Node<'t, 'u> = gimli::EntriesTreeNode<'u, 't, Reader>;

impl Wanted<'_> {
    fn complete(&self) -> bool {
        self.found.structs.len() == self.structs.len()
            && self.found.enumerators.len() == self.enumerators.len()
    }

    /// Whether a namespace may hold something still missing: a wanted
    /// structure named within it, or any enumerator.
    fn may_hold(&self, scope: &str) -> bool {
        self.found.enumerators.len() < self.enumerators.len()
            || self
                .structs
                .iter()
                .any(|s| s.starts_with(scope) && !self.found.structs.contains_key(*s))
    }

    fn wants_struct(&self, name: &str) -> bool {
        self.structs.contains(&name) && !self.found.structs.contains_key(name)
    }

    /// The children of `node`, named within `scope` (`tflite::`). Functions
    /// are not entered: types local to one are nobody's interface.
    fn walk(
        &mut self,
        dwarf: &gimli::Dwarf<Reader>,
        unit: &gimli::Unit<Reader>,
        node: Node<'_, '_>,
        scope: &str,
        depth: usize,
    ) -> gimli::Result<()> {
        // Deeper scopes than any program's: a file made to exhaust the
        // stack is read no further.
        if depth > MAX_SCOPE_DEPTH {
            return Ok(());
        }
        let mut children = node.children();
        while let Some(child) = children.next()? {
            if self.complete() {
                return Ok(());
            }
            let entry = child.entry();
            let tag = entry.tag();
            let name = entry_name(dwarf, unit, entry);
            let declaration = entry.attr_value(gimli::DW_AT_declaration).is_some();
            let qualified = name.as_ref().map(|n| format!("{scope}{n}"));
            match tag {
                gimli::DW_TAG_namespace => {
                    let inner = match &qualified {
                        Some(q) => format!("{q}::"),
                        // An anonymous namespace's names are the unit's own.
                        None => continue,
                    };
                    if self.may_hold(&inner) {
                        self.walk(dwarf, unit, child, &inner, depth + 1)?;
                    }
                }
                gimli::DW_TAG_structure_type | gimli::DW_TAG_class_type => {
                    let Some(q) = qualified else { continue };
                    if declaration {
                        continue;
                    }
                    if self.wants_struct(&q) {
                        let size = entry
                            .attr_value(gimli::DW_AT_byte_size)
                            .and_then(|v| v.udata_value());
                        let layout = struct_layout(dwarf, unit, child, size)?;
                        self.found.structs.insert(q, layout);
                    } else {
                        // Nested types (`Outer::Inner`) are named within it;
                        // only entered when one is wanted (there are many
                        // structures, each with many members).
                        let inner = format!("{q}::");
                        if self.structs.iter().any(|s| s.starts_with(&inner)) {
                            self.walk(dwarf, unit, child, &inner, depth + 1)?;
                        }
                    }
                }
                gimli::DW_TAG_typedef => {
                    // `typedef struct { … } Name;`: the structure has no
                    // name of its own.
                    let Some(q) = qualified.filter(|q| self.wants_struct(q)) else {
                        continue;
                    };
                    if let Some(layout) = typedef_layout(dwarf, unit, entry)? {
                        self.found.structs.insert(q, layout);
                    }
                }
                gimli::DW_TAG_enumeration_type => self.enumerators_of(dwarf, unit, child)?,
                _ => {}
            }
        }
        Ok(())
    }

    fn enumerators_of(
        &mut self,
        dwarf: &gimli::Dwarf<Reader>,
        unit: &gimli::Unit<Reader>,
        node: Node<'_, '_>,
    ) -> gimli::Result<()> {
        let mut children = node.children();
        while let Some(child) = children.next()? {
            let entry = child.entry();
            if entry.tag() != gimli::DW_TAG_enumerator {
                continue;
            }
            let Some(name) = entry_name(dwarf, unit, entry) else {
                continue;
            };
            if !self.enumerators.contains(&name.as_str()) {
                continue;
            }
            let value = entry.attr(gimli::DW_AT_const_value).and_then(|a| {
                a.sdata_value()
                    .or_else(|| a.udata_value().and_then(|v| i64::try_from(v).ok()))
            });
            if let Some(v) = value {
                self.found.enumerators.entry(name).or_insert(v);
            }
        }
        Ok(())
    }
}

fn entry_name(
    dwarf: &gimli::Dwarf<Reader>,
    unit: &gimli::Unit<Reader>,
    entry: &gimli::DebuggingInformationEntry<Reader>,
) -> Option<String> {
    let value = entry.attr_value(gimli::DW_AT_name)?;
    let name = dwarf.attr_string(unit, value).ok()?;
    Some(gimli::Reader::to_string_lossy(&name).ok()?.into_owned())
}

/// The members and bases of the structure at `node`, of `size` bytes.
fn struct_layout(
    dwarf: &gimli::Dwarf<Reader>,
    unit: &gimli::Unit<Reader>,
    node: Node<'_, '_>,
    size: Option<u64>,
) -> gimli::Result<StructLayout> {
    let mut layout = StructLayout {
        size: size.unwrap_or(0),
        ..StructLayout::default()
    };
    let mut children = node.children();
    while let Some(child) = children.next()? {
        let entry = child.entry();
        let Some(offset) = member_offset(unit, entry) else {
            continue;
        };
        match entry.tag() {
            gimli::DW_TAG_member => {
                if let Some(name) = entry_name(dwarf, unit, entry) {
                    let size = type_size(unit, entry);
                    layout.members.insert(name, Member { offset, size });
                }
            }
            gimli::DW_TAG_inheritance => {
                let base = match entry.attr_value(gimli::DW_AT_type) {
                    Some(gimli::AttributeValue::UnitRef(at)) => unit.entry(at).ok(),
                    _ => None,
                };
                if let Some(name) = base.and_then(|b| entry_name(dwarf, unit, &b)) {
                    layout.bases.insert(name, offset);
                }
            }
            _ => {}
        }
    }
    Ok(layout)
}

/// The layout of the structure a typedef names, when it is one in the same
/// unit.
fn typedef_layout(
    dwarf: &gimli::Dwarf<Reader>,
    unit: &gimli::Unit<Reader>,
    entry: &gimli::DebuggingInformationEntry<Reader>,
) -> gimli::Result<Option<StructLayout>> {
    let Some(gimli::AttributeValue::UnitRef(at)) = entry.attr_value(gimli::DW_AT_type) else {
        return Ok(None);
    };
    let mut tree = unit.entries_tree(Some(at))?;
    let root = tree.root()?;
    let target = root.entry();
    let is_struct = matches!(
        target.tag(),
        gimli::DW_TAG_structure_type | gimli::DW_TAG_class_type
    );
    if !is_struct || target.attr_value(gimli::DW_AT_declaration).is_some() {
        return Ok(None);
    }
    let size = target
        .attr_value(gimli::DW_AT_byte_size)
        .and_then(|v| v.udata_value());
    struct_layout(dwarf, unit, root, size).map(Some)
}

/// `sizeof` the type of `entry`: its `DW_AT_byte_size`, through typedefs
/// and cv-qualifiers (a few steps, within the unit).
fn type_size(
    unit: &gimli::Unit<Reader>,
    entry: &gimli::DebuggingInformationEntry<Reader>,
) -> Option<u64> {
    let mut at = match entry.attr_value(gimli::DW_AT_type)? {
        gimli::AttributeValue::UnitRef(at) => at,
        _ => return None,
    };
    for _ in 0..8 {
        let ty = unit.entry(at).ok()?;
        if let Some(size) = ty.attr_value(gimli::DW_AT_byte_size) {
            return size.udata_value();
        }
        match ty.attr_value(gimli::DW_AT_type)? {
            gimli::AttributeValue::UnitRef(next) => at = next,
            _ => return None,
        }
    }
    None
}

/// `DW_AT_data_member_location`: a constant, or the one-operation
/// expression `DW_OP_plus_uconst N` older DWARF writes.
fn member_offset(
    unit: &gimli::Unit<Reader>,
    entry: &gimli::DebuggingInformationEntry<Reader>,
) -> Option<u64> {
    let value = entry.attr_value(gimli::DW_AT_data_member_location)?;
    if let Some(v) = value.udata_value() {
        return Some(v);
    }
    let expression = value.exprloc_value()?;
    let mut ops = expression.operations(unit.encoding());
    match (ops.next(), ops.next()) {
        (Ok(Some(gimli::Operation::PlusConstant { value })), Ok(None)) => Some(value),
        _ => None,
    }
}
