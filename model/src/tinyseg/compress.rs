//! TinySeg's dynamic tensor compression (Section 5.1): a tensor is sent to
//! storage as its most frequent element value (the *representative*), a
//! bitmap with one bit per element marking the elements that differ from it,
//! and those other elements in order.

use serde::Serialize;

/// A tensor in TinySeg's compressed form.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Compressed {
    /// Bytes of one element.
    pub element_bytes: usize,
    /// The most frequent element (its bytes; the smallest such value on ties).
    pub representative: Vec<u8>,
    /// Bit `i` (LSB first within each byte) set: element `i` is not the
    /// representative.
    pub bitmap: Vec<u8>,
    /// The elements that are not the representative, in order.
    pub others: Vec<u8>,
    /// Number of elements.
    pub elements: usize,
}

impl Compressed {
    /// Bytes moved in compressed form: representative + bitmap + others.
    pub fn bytes(&self) -> u64 {
        (self.representative.len() + self.bitmap.len() + self.others.len()) as u64
    }

    /// Elements equal to the representative.
    #[cfg(test)]
    pub(crate) fn representative_count(&self) -> usize {
        self.elements - self.others.len() / self.element_bytes.max(1)
    }

    /// The original bytes.
    pub fn decompress(&self) -> Vec<u8> {
        let e = self.element_bytes.max(1);
        let mut out = Vec::with_capacity(self.elements * e);
        let mut others = self.others.chunks_exact(e);
        for i in 0..self.elements {
            if self.bitmap[i / 8] >> (i % 8) & 1 == 1 {
                out.extend_from_slice(others.next().unwrap_or(&self.representative));
            } else {
                out.extend_from_slice(&self.representative);
            }
        }
        out
    }
}

/// Compresses `data`, a tensor of `element_bytes`-byte elements (a trailing
/// partial element is ignored).
pub fn compress(data: &[u8], element_bytes: usize) -> Compressed {
    let e = element_bytes.max(1);
    let elements: Vec<&[u8]> = data.chunks_exact(e).collect();
    let mut sorted = elements.clone();
    sorted.sort_unstable();
    // Most frequent value: the longest run of the sorted elements.
    let mut representative: &[u8] = &[];
    let (mut best, mut run) = (0usize, 0usize);
    for (i, v) in sorted.iter().enumerate() {
        run = if i > 0 && sorted[i - 1] == *v {
            run + 1
        } else {
            1
        };
        if run > best {
            best = run;
            representative = v;
        }
    }
    let mut bitmap = vec![0u8; elements.len().div_ceil(8)];
    let mut others = Vec::new();
    for (i, v) in elements.iter().enumerate() {
        if *v != representative {
            bitmap[i / 8] |= 1 << (i % 8);
            others.extend_from_slice(v);
        }
    }
    Compressed {
        element_bytes: e,
        representative: representative.to_vec(),
        bitmap,
        others,
        elements: elements.len(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_papers_figure_9_example_round_trips() {
        // Mostly -9 with a few others, as in Fig. 9(a).
        let data: Vec<u8> = [-9i8, 3, -9, -9, 7, -9, -9, -9, -9, 1]
            .iter()
            .map(|&v| v as u8)
            .collect();
        let c = compress(&data, 1);
        assert_eq!(c.representative, vec![(-9i8) as u8]);
        assert_eq!(c.others, vec![3, 7, 1]);
        // 1 representative + ceil(10/8) bitmap bytes + 3 others.
        assert_eq!(c.bytes(), 1 + 2 + 3);
        assert_eq!(c.representative_count(), 7);
        assert_eq!(c.decompress(), data);
    }

    #[test]
    fn multi_byte_elements_compare_whole_elements() {
        let data: Vec<u8> = [5i32, 5, 6, 5]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let c = compress(&data, 4);
        assert_eq!(c.representative, 5i32.to_le_bytes().to_vec());
        assert_eq!(c.bytes(), 4 + 1 + 4);
        assert_eq!(c.decompress(), data);
    }
}
