// spec_text.cc — the `params` string of LAYER_BEGIN.
//
// It must be exactly what abi/src/spec/text.rs prints for the same layer
// (`Display for LayerSpec`), so that the host can parse it back with
// `LayerSpec::parse` and re-describe the traced layer to the algorithmic and
// analytic O_s methods:
//
//   op=<op>,dtype=<f32|int8>,input=NxHxWxC
//   [,input2=NxHxWxC,axis=A]               (concatenation)
//   [,filter=AxBxCxD]                      (not for add, relu, concatenation, pad)
//   [,pad_before=NxHxWxC,pad_after=NxHxWxC]  (pad)
//   ,output=NxHxWxC
//   [,stride=HxW[,dilation=HxW],padding=<same|valid>,pad=HxW]   (conv2d,
//       depthwise_conv2d, max/average_pool; transpose_conv without dilation)
//   [,depth_multiplier=M]                  (depthwise_conv2d)
//   [,activation=<relu|relu6>]             (only when not none)
#include "suite.h"

namespace memtrace {
namespace {

class Writer {
  public:
    Writer(char *out, size_t cap) : out_(out), cap_(cap), len_(0), ok_(cap > 0) {}

    void str(const char *s) {
        while (*s) {
            put(*s++);
        }
    }

    void num(int32_t v) {
        char digits[12];
        int n = 0;
        uint32_t u;
        if (v < 0) {
            put('-');
            u = 0u - static_cast<uint32_t>(v);
        } else {
            u = static_cast<uint32_t>(v);
        }
        do {
            digits[n++] = static_cast<char>('0' + u % 10u);
            u /= 10u;
        } while (u != 0);
        while (n > 0) {
            put(digits[--n]);
        }
    }

    void shape(const char *key, const int32_t *dims) {
        str(key);
        for (int i = 0; i < 4; ++i) {
            if (i) {
                put('x');
            }
            num(dims[i]);
        }
    }

    void pair(const char *key, int32_t a, int32_t b) {
        str(key);
        num(a);
        put('x');
        num(b);
    }

    bool finish() {
        if (!ok_) {
            return false;
        }
        out_[len_] = '\0';
        return true;
    }

  private:
    void put(char c) {
        if (len_ + 1 >= cap_) {  // keep room for the NUL
            ok_ = false;
            return;
        }
        out_[len_++] = c;
    }

    char *out_;
    size_t cap_;
    size_t len_;
    bool ok_;
};

bool has_window(int32_t op) {
    return op == OP_CONV2D || op == OP_DEPTHWISE_CONV2D || op == OP_MAX_POOL ||
           op == OP_AVERAGE_POOL || op == OP_TRANSPOSE_CONV;
}

bool has_filter(int32_t op) {
    return op != OP_ADD && op != OP_RELU && op != OP_CONCATENATION && op != OP_PAD;
}

}  // namespace

const char *op_name(int32_t op) {
    switch (op) {
        case OP_CONV2D: return "conv2d";
        case OP_DEPTHWISE_CONV2D: return "depthwise_conv2d";
        case OP_MAX_POOL: return "max_pool";
        case OP_AVERAGE_POOL: return "average_pool";
        case OP_FULLY_CONNECTED: return "fully_connected";
        case OP_ADD: return "add";
        case OP_RELU: return "relu";
        case OP_MATMUL: return "matmul";
        case OP_TRANSPOSE_CONV: return "transpose_conv";
        case OP_CONCATENATION: return "concatenation";
        case OP_PAD: return "pad";
        default: return nullptr;
    }
}

bool format_params(const Layer &l, char *out, size_t cap) {
    const char *op = op_name(l.op);
    if (!op) {
        return false;
    }
    Writer w(out, cap);
    w.str("op=");
    w.str(op);
    w.str(l.dtype == DTYPE_INT8 ? ",dtype=int8" : ",dtype=f32");
    w.shape(",input=", l.input);
    if (l.op == OP_CONCATENATION) {
        w.shape(",input2=", l.input2);
        w.str(",axis=");
        w.num(l.axis);
    }
    if (has_filter(l.op)) {
        w.shape(",filter=", l.filter);
    }
    if (l.op == OP_PAD) {
        w.shape(",pad_before=", l.pad_before);
        w.shape(",pad_after=", l.pad_after);
    }
    w.shape(",output=", l.output);
    if (has_window(l.op)) {
        w.pair(",stride=", l.stride_h, l.stride_w);
        if (l.op != OP_TRANSPOSE_CONV) {
            w.pair(",dilation=", l.dilation_h, l.dilation_w);
        }
        w.str(l.padding == 2 ? ",padding=valid" : ",padding=same");
        w.pair(",pad=", l.pad_h, l.pad_w);
    }
    if (l.op == OP_DEPTHWISE_CONV2D) {
        w.str(",depth_multiplier=");
        w.num(l.depth_multiplier);
    }
    if (l.activation == 1) {
        w.str(",activation=relu");
    } else if (l.activation == 2) {
        w.str(",activation=relu6");
    }
    return w.finish();
}

}  // namespace memtrace
