//! Reading a call's arguments: the words and structures at its entry, the
//! buffers they describe, and the sizes of the CMSIS-NN v7.0.0 structures
//! (every field a 32-bit word).

use memtrace_abi::Role;

use super::layouts::ApiLayouts;
use super::{ApiFunction, CallBuffer, CallLayer, CallSite};

/// Entries of `exp_lut` and `one_by_one_lut` of `arm_softmax_s16`
/// (arm_nnfunctions.h: 512 for the 9-bit index and one to interpolate).
pub(super) const SOFTMAX_LUT_ENTRIES: u64 = 513;

/// A structure argument: where it is and how many bytes it has.
pub(super) const DIMS_BYTES: u64 = 16;
pub(super) const CONTEXT_BYTES: u64 = 8;
pub(super) const CONV_PARAMS_BYTES: u64 = 40;
pub(super) const DW_CONV_PARAMS_BYTES: u64 = 44;
pub(super) const FC_PARAMS_BYTES: u64 = 20;
pub(super) const POOL_PARAMS_BYTES: u64 = 24;
pub(super) const QUANT_BYTES: u64 = 12;
pub(super) const PER_TENSOR_QUANT_BYTES: u64 = 8;

/// `cmsis_nn_dims` as NHWC.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Dims {
    pub(super) n: u64,
    pub(super) h: u64,
    pub(super) w: u64,
    pub(super) c: u64,
}

/// The product of `factors`, saturated: four dimensions of up to 2^16
/// each overflow 64 bits (with an element size), and a buffer that large
/// is then refused as larger than guest memory rather than wrapped into a
/// small one that looks real.
pub(super) fn product(factors: &[u64]) -> u64 {
    factors.iter().fold(1, |p, &f| p.saturating_mul(f))
}

impl Dims {
    /// Elements, saturated ([`product`]).
    pub(super) fn volume(&self) -> u64 {
        product(&[self.n, self.h, self.w, self.c])
    }
    /// Bytes with `elem`-byte elements, saturated ([`product`]).
    pub(super) fn bytes(&self, elem: u32) -> u64 {
        self.volume().saturating_mul(elem as u64)
    }
    pub(super) fn text(&self) -> String {
        format!("{}x{}x{}x{}", self.n, self.h, self.w, self.c)
    }
}

/// A `(h, w)` pair of `cmsis_nn_tile`s.
pub(super) type Tile = (u64, u64);

pub(super) struct Reader<'a> {
    pub(super) site: &'a dyn CallSite,
    pub(super) layouts: &'a ApiLayouts,
    pub(super) layer: CallLayer,
}

/// Dimensions past this are taken as garbage (an unset field), not a shape.
pub(super) const MAX_DIM: u32 = 1 << 16;

impl Reader<'_> {
    pub(super) fn arg(&self, i: usize) -> u64 {
        self.site.arg(i) as u64
    }
    pub(super) fn word(&self, at: u64, index: u64) -> Result<u32, String> {
        self.site
            .word(at + 4 * index)
            .ok_or_else(|| format!("argument structure at {at:#x} is not in guest memory"))
    }
    /// The word at `address` (a member of a structure read with a layout
    /// of [`ApiLayouts`]).
    pub(super) fn word_at(&self, address: u64) -> Result<u32, String> {
        self.site
            .word(address)
            .ok_or_else(|| format!("argument structure at {address:#x} is not in guest memory"))
    }
    /// A dimension read from a structure (`what` names it): a positive
    /// shape, or why it is none.
    pub(super) fn dimension(&self, address: u64, what: &str) -> Result<u64, String> {
        let v = self.word_at(address)?;
        if v == 0 || v > MAX_DIM {
            return Err(format!("{what} is {} (not a shape)", v as i32));
        }
        Ok(v as u64)
    }
    pub(super) fn structure(&mut self, arg: usize, bytes: u64) -> Result<u64, String> {
        let at = self.arg(arg);
        if at == 0 {
            return Err(format!("argument {arg} is NULL"));
        }
        self.layer.structs.push((at, bytes));
        Ok(at)
    }
    /// The `cmsis_nn_dims` at argument `arg`, the fields named in `used`
    /// (of `nhwc`) read and checked, the others 1: callers leave the fields
    /// a kernel does not read unset (a convolution's filter and output `n`,
    /// a depthwise filter's `c`).
    pub(super) fn dims(&mut self, arg: usize, used: &str) -> Result<Dims, String> {
        let at = self.structure(arg, DIMS_BYTES)?;
        let field = |i: u64| -> Result<u64, String> {
            if !used.contains(["n", "h", "w", "c"][i as usize]) {
                return Ok(1);
            }
            let v = self.word(at, i)?;
            if v == 0 || v > MAX_DIM {
                return Err(format!(
                    "argument {arg}: dimension {} is {} (not a shape)",
                    ["n", "h", "w", "c"][i as usize],
                    v as i32
                ));
            }
            Ok(v as u64)
        };
        Ok(Dims {
            n: field(0)?,
            h: field(1)?,
            w: field(2)?,
            c: field(3)?,
        })
    }
    /// `(h, w)` of the tile at word `index` (`cmsis_nn_tile` is `w, h`).
    pub(super) fn tile(&self, at: u64, index: u64) -> Result<Tile, String> {
        Ok((
            self.word(at, index + 1)? as u64,
            self.word(at, index)? as u64,
        ))
    }
    pub(super) fn buffer(
        &mut self,
        role: Role,
        name: &'static str,
        base: u64,
        size: u64,
        elem: u32,
    ) {
        if base != 0 && size > 0 {
            self.layer.buffers.push(CallBuffer {
                role,
                name,
                base,
                size,
                elem_size: elem,
            });
        }
    }
    /// The scratch buffer of the context at argument `arg`.
    pub(super) fn context(&mut self, arg: usize) -> Result<(), String> {
        let at = self.arg(arg);
        if at == 0 {
            return Ok(());
        }
        self.layer.structs.push((at, CONTEXT_BYTES));
        let buf = self.word(at, 0)? as u64;
        if buf != 0 {
            self.layer.scratch.push(buf);
        }
        // The heap block first: callers leave `ctx.size` unset (CMSIS-NN's
        // own tests do) since no kernel reads it.
        let size = match self.site.heap_block_rest(buf) {
            Some(rest) => rest,
            None => (self.word(at, 1)? as i32).max(0) as u64,
        };
        self.buffer(Role::Scratch, "scratch", buf, size, 1);
        Ok(())
    }
    /// Per-channel multipliers and shifts of `channels` output channels.
    pub(super) fn per_channel(&mut self, arg: usize, channels: u64) -> Result<(), String> {
        let at = self.structure(arg, 8)?;
        let (mult, shift) = (self.word(at, 0)? as u64, self.word(at, 1)? as u64);
        self.buffer(Role::Weights, "multiplier", mult, 4 * channels, 4);
        self.buffer(Role::Weights, "shift", shift, 4 * channels, 4);
        Ok(())
    }
    /// The bias of `channels` outputs at argument `arg`.
    pub(super) fn bias(&mut self, arg: usize, elem: u32, channels: u64) -> Result<(), String> {
        let at = self.arg(arg);
        if elem > 0 {
            self.buffer(Role::Bias, "bias", at, elem as u64 * channels, elem);
            return Ok(());
        }
        // `cmsis_nn_bias_data`: the data and whether it is int32 (else int64).
        if at == 0 {
            return Ok(());
        }
        self.layer.structs.push((at, 8));
        let data = self.word(at, 0)? as u64;
        let int32 = self.word(at, 1)? & 0xFF != 0;
        let elem = if int32 { 4 } else { 8 };
        self.buffer(Role::Bias, "bias", data, elem as u64 * channels, elem);
        Ok(())
    }
}

pub(super) fn filter_bytes(api: &ApiFunction, weights: u64) -> u64 {
    if api.packed {
        weights.div_ceil(2)
    } else {
        weights
    }
}

/// The spec's dtype, when the suite has one for this function.
pub(super) fn spec_dtype(api: &ApiFunction) -> Option<&'static str> {
    (api.input_elem == 1 && api.output_elem == 1 && !api.packed && !api.name.ends_with("u8"))
        .then_some("int8")
}

/// `same` when the explicit padding is not zero, else `valid`; the spec's
/// own rules check that the output shape agrees.
pub(super) fn padding_word(pad: Tile) -> &'static str {
    if pad == (0, 0) {
        "valid"
    } else {
        "same"
    }
}
