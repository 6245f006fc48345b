//! The layouts of the structures the SVDF and LSTM families read
//! (`cmsis_nn_svdf_params`, `cmsis_nn_lstm_params`, `cmsis_nn_lstm_gate`,
//! `cmsis_nn_lstm_context`): from the program's own DWARF when it
//! describes them, else CMSIS-NN v7.0.0's (`Include/arm_nn_types.h`, where
//! every member is a 32-bit word on a Cortex-M).
//!
//! The LSTM's structures are nested (four gates inside the parameters) and
//! change between releases (the development head adds `hidden_state` to
//! the context), so the offsets of the build being checked are the ones
//! its compiler chose; a structure the DWARF lacks, or whose DWARF lacks a
//! member read here, keeps v7.0.0's layout.

use crate::debuginfo::{StructLayout, TypeLayouts};

/// `cmsis_nn_svdf_params`: its size and where `rank` is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SvdfParamsLayout {
    pub size: u64,
    pub rank: u64,
}

/// `cmsis_nn_lstm_params`: its size, the dimension members and the four
/// gates (forget, input, cell, output, in that order).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct LstmParamsLayout {
    pub size: u64,
    pub time_major: u64,
    pub batch_size: u64,
    pub time_steps: u64,
    pub input_size: u64,
    pub hidden_size: u64,
    pub gates: [u64; 4],
}

/// `cmsis_nn_lstm_gate`: where its four arrays are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct LstmGateLayout {
    pub input_weights: u64,
    pub input_effective_bias: u64,
    pub hidden_weights: u64,
    pub hidden_effective_bias: u64,
}

/// `cmsis_nn_lstm_context`: its size and its three scratch pointers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct LstmContextLayout {
    pub size: u64,
    pub temp1: u64,
    pub temp2: u64,
    pub cell_state: u64,
}

/// Every structure layout the API table reads beyond its word-sized
/// ones, and where each came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ApiLayouts {
    pub svdf_params: SvdfParamsLayout,
    pub lstm_params: LstmParamsLayout,
    pub lstm_gate: LstmGateLayout,
    pub lstm_context: LstmContextLayout,
}

/// The structures [`ApiLayouts::from_types`] looks up in the DWARF.
pub(crate) const STRUCTS: [&str; 4] = [
    "cmsis_nn_svdf_params",
    "cmsis_nn_lstm_params",
    "cmsis_nn_lstm_gate",
    "cmsis_nn_lstm_context",
];

/// Words of v7.0.0's `cmsis_nn_lstm_gate` (multiplier, shift, weights,
/// effective bias for the input and the hidden state, the bias and the
/// activation type).
const V7_GATE_WORDS: u64 = 10;
/// Words of v7.0.0's `cmsis_nn_lstm_params` before its first gate.
const V7_PARAMS_HEAD_WORDS: u64 = 15;

impl ApiLayouts {
    /// CMSIS-NN v7.0.0's layouts on a 32-bit core.
    pub(crate) const V7_0_0: ApiLayouts = ApiLayouts {
        svdf_params: SvdfParamsLayout { size: 28, rank: 0 },
        lstm_params: LstmParamsLayout {
            size: 4 * (V7_PARAMS_HEAD_WORDS + 4 * V7_GATE_WORDS),
            time_major: 0,
            batch_size: 4,
            time_steps: 8,
            input_size: 12,
            hidden_size: 16,
            gates: [
                4 * V7_PARAMS_HEAD_WORDS,
                4 * (V7_PARAMS_HEAD_WORDS + V7_GATE_WORDS),
                4 * (V7_PARAMS_HEAD_WORDS + 2 * V7_GATE_WORDS),
                4 * (V7_PARAMS_HEAD_WORDS + 3 * V7_GATE_WORDS),
            ],
        },
        lstm_gate: LstmGateLayout {
            input_weights: 8,
            input_effective_bias: 12,
            hidden_weights: 24,
            hidden_effective_bias: 28,
        },
        lstm_context: LstmContextLayout {
            size: 12,
            temp1: 0,
            temp2: 4,
            cell_state: 8,
        },
    };

    /// The layouts `types` (the program's DWARF, looked up for
    /// [`STRUCTS`]) describes completely, v7.0.0's for the others.
    pub(crate) fn from_types(types: &TypeLayouts) -> ApiLayouts {
        let v7 = ApiLayouts::V7_0_0;
        let dwarf = |name: &str| types.structs.get(name).filter(|s| s.size > 0);
        ApiLayouts {
            svdf_params: dwarf(STRUCTS[0])
                .and_then(svdf_params)
                .unwrap_or(v7.svdf_params),
            lstm_params: dwarf(STRUCTS[1])
                .and_then(lstm_params)
                .unwrap_or(v7.lstm_params),
            lstm_gate: dwarf(STRUCTS[2])
                .and_then(lstm_gate)
                .unwrap_or(v7.lstm_gate),
            lstm_context: dwarf(STRUCTS[3])
                .and_then(lstm_context)
                .unwrap_or(v7.lstm_context),
        }
    }
}

fn offset(s: &StructLayout, member: &str) -> Option<u64> {
    s.member(member).map(|m| m.offset)
}

fn svdf_params(s: &StructLayout) -> Option<SvdfParamsLayout> {
    Some(SvdfParamsLayout {
        size: s.size,
        rank: offset(s, "rank")?,
    })
}

fn lstm_params(s: &StructLayout) -> Option<LstmParamsLayout> {
    Some(LstmParamsLayout {
        size: s.size,
        time_major: offset(s, "time_major")?,
        batch_size: offset(s, "batch_size")?,
        time_steps: offset(s, "time_steps")?,
        input_size: offset(s, "input_size")?,
        hidden_size: offset(s, "hidden_size")?,
        gates: [
            offset(s, "forget_gate")?,
            offset(s, "input_gate")?,
            offset(s, "cell_gate")?,
            offset(s, "output_gate")?,
        ],
    })
}

fn lstm_gate(s: &StructLayout) -> Option<LstmGateLayout> {
    Some(LstmGateLayout {
        input_weights: offset(s, "input_weights")?,
        input_effective_bias: offset(s, "input_effective_bias")?,
        hidden_weights: offset(s, "hidden_weights")?,
        hidden_effective_bias: offset(s, "hidden_effective_bias")?,
    })
}

fn lstm_context(s: &StructLayout) -> Option<LstmContextLayout> {
    Some(LstmContextLayout {
        size: s.size,
        temp1: offset(s, "temp1")?,
        temp2: offset(s, "temp2")?,
        cell_state: offset(s, "cell_state")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::debuginfo::Member;

    fn layout(size: u64, members: &[(&str, u64)]) -> StructLayout {
        StructLayout {
            size,
            members: members
                .iter()
                .map(|&(n, offset)| {
                    (
                        n.to_owned(),
                        Member {
                            offset,
                            size: Some(4),
                        },
                    )
                })
                .collect(),
            bases: Default::default(),
        }
    }

    #[test]
    fn a_program_without_dwarf_reads_v7_0_0s_word_layouts() {
        let layouts = ApiLayouts::from_types(&TypeLayouts::default());
        assert_eq!(layouts, ApiLayouts::V7_0_0);
        // Recomputed from the header's member lists: 15 words, then four
        // gates of 10 words each; the context's three pointers.
        assert_eq!(layouts.lstm_params.size, 220);
        assert_eq!(layouts.lstm_params.gates[3], 60 + 3 * 40);
        assert_eq!(layouts.lstm_context.size, 3 * 4);
    }

    #[test]
    fn the_compilers_layouts_of_v7_0_0s_header_are_the_word_layouts() {
        // CMSIS-NN v7.0.0's own LSTM and SVDF tests, compiled with -g
        // (`make -C harness-c/unit-tests`): their DWARF is the compiler's
        // reading of arm_nn_types.h, independent of the constants above.
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../harness-c/build/cortex-m4/unit-tests");
        for suite in ["test_arm_lstm_unidirectional_s16", "test_arm_svdf_s8"] {
            let elf = dir.join(format!("{suite}.elf"));
            assert!(
                elf.exists(),
                "build the unit tests first: make -C harness-c/unit-tests"
            );
            let image = crate::elf::ElfImage::load(&elf).unwrap();
            let types = TypeLayouts::load(&image, &STRUCTS, &[]);
            let expected = if suite.contains("lstm") { 3 } else { 1 };
            assert_eq!(types.structs.len(), expected, "{suite}: {types:?}");
            assert_eq!(
                ApiLayouts::from_types(&types),
                ApiLayouts::V7_0_0,
                "{suite}"
            );
        }
    }

    #[test]
    fn a_context_with_a_fourth_member_takes_the_dwarfs_size() {
        let mut types = TypeLayouts::default();
        // The development head's context: `hidden_state` after `cell_state`.
        types.structs.insert(
            "cmsis_nn_lstm_context".into(),
            layout(
                16,
                &[
                    ("temp1", 0),
                    ("temp2", 4),
                    ("cell_state", 8),
                    ("hidden_state", 12),
                ],
            ),
        );
        // A gate missing a member keeps v7.0.0's layout.
        types.structs.insert(
            "cmsis_nn_lstm_gate".into(),
            layout(40, &[("input_weights", 8)]),
        );
        let layouts = ApiLayouts::from_types(&types);
        assert_eq!(layouts.lstm_context.size, 16);
        assert_eq!(layouts.lstm_context.cell_state, 8);
        assert_eq!(layouts.lstm_gate, ApiLayouts::V7_0_0.lstm_gate);
    }
}
