//! Which layers a run records: `--layer` values, each a layer's name, its
//! index (`3`) or its index and operator (`3:CONV_2D`), the short forms the
//! reports print beside long names such as a TFLite tensor's.

/// Whether the `--layer` value `selector` picks the layer `index`, named
/// `name`, of operator `op`. A name wins over the short forms, so a layer
/// that is really named `3` is still found by its name.
pub fn selects(selector: &str, index: usize, name: &str, op: &str) -> bool {
    if selector == name {
        return true;
    }
    match selector.split_once(':') {
        Some((i, o)) => i.parse() == Ok(index) && o.eq_ignore_ascii_case(op),
        None => selector.parse() == Ok(index),
    }
}

/// The short id of a layer, `3:CONV_2D`, that `--layer` takes.
pub fn short_id(index: usize, op: &str) -> String {
    format!("{index}:{op}")
}

/// Longest layer name that tables and pictures print as it is.
pub const DISPLAY_NAME_CHARS: usize = 32;

/// A layer's name as tables and pictures print it: the name itself when
/// short (a kernel binary's `conv1`), else its short id and the end of the
/// name's first part (`3:CONV_2D …conv2d_1/Relu`), so that a TFLite tensor
/// name such as `model/conv2d_1/Relu;model/conv2d_1/BiasAdd` neither wraps
/// nor hides which layer it is. Reports in JSON keep the full name.
pub fn display_name(index: usize, name: &str, op: &str) -> String {
    if name.chars().count() <= DISPLAY_NAME_CHARS {
        return name.to_owned();
    }
    let first: Vec<char> = name.split(';').next().unwrap_or_default().chars().collect();
    let tail: String = first[first.len().saturating_sub(DISPLAY_NAME_CHARS / 2)..]
        .iter()
        .collect();
    format!("{} …{tail}", short_id(index, op))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_layer_is_picked_by_name_index_or_index_and_op() {
        let (index, name, op) = (3, "model/conv2d_1/Relu;model/conv2d_1/BiasAdd", "CONV_2D");
        for yes in [name, "3", "3:CONV_2D", "3:conv_2d"] {
            assert!(selects(yes, index, name, op), "{yes}");
        }
        for no in [
            "2",
            "3:DEPTHWISE_CONV_2D",
            "model/conv2d_1",
            "x:CONV_2D",
            "",
        ] {
            assert!(!selects(no, index, name, op), "{no}");
        }
        // A layer really named `7` keeps its name.
        assert!(selects("7", 0, "7", "relu"));
        assert_eq!(short_id(index, op), "3:CONV_2D");
    }

    #[test]
    fn long_names_are_shown_by_short_id_and_their_end() {
        assert_eq!(display_name(1, "conv1", "conv2d"), "conv1");
        let long = "MobilenetV1/MobilenetV1/Conv2d_1_depthwise/Relu6;other/part";
        assert_eq!(
            display_name(4, long, "DEPTHWISE_CONV_2D"),
            "4:DEPTHWISE_CONV_2D …_depthwise/Relu6"
        );
    }
}
