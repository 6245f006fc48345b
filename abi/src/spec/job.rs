//! The job mailbox of `memtrace_job.h`: one layer, as the kernel suite reads
//! it from guest memory.

use super::{LayerSpec, Paddings};

impl LayerSpec {
    /// The job-mailbox words (`memtrace_job.h`).
    pub fn job_words(&self, seed: u32) -> [i32; JOB_WORDS] {
        let mut w = [0i32; JOB_WORDS];
        w[JOB_MAGIC] = MEMTRACE_JOB_MAGIC as i32;
        // LayerSpec::new admits only the ops the suite runs.
        w[JOB_OP] = self.op.job_code().unwrap_or(0);
        w[JOB_DTYPE] = self.dtype.job_code().unwrap_or(0);
        for i in 0..4 {
            w[JOB_INPUT + i] = self.input[i] as i32;
            w[JOB_FILTER + i] = self.filter[i] as i32;
            w[JOB_OUTPUT + i] = self.output[i] as i32;
        }
        w[JOB_STRIDE_H] = self.stride.0 as i32;
        w[JOB_STRIDE_W] = self.stride.1 as i32;
        w[JOB_DILATION_H] = self.dilation.0 as i32;
        w[JOB_DILATION_W] = self.dilation.1 as i32;
        w[JOB_PADDING] = self.padding.job_code();
        w[JOB_PAD_H] = self.pad.0 as i32;
        w[JOB_PAD_W] = self.pad.1 as i32;
        w[JOB_DEPTH_MULTIPLIER] = self.depth_multiplier as i32;
        // LayerSpec::new admits only the activations the suite fuses.
        w[JOB_ACTIVATION] = self.activation.job_code().unwrap_or(0);
        w[JOB_SEED] = seed as i32;
        w[JOB_AXIS] = self.axis.map_or(0, |a| a as i32);
        let p = self.paddings.unwrap_or(Paddings {
            before: [0; 4],
            after: [0; 4],
        });
        for i in 0..4 {
            w[JOB_INPUT2 + i] = self.input2.map_or(0, |s| s[i] as i32);
            w[JOB_PAD_BEFORE + i] = p.before[i] as i32;
            w[JOB_PAD_AFTER + i] = p.after[i] as i32;
        }
        w
    }
}

c_constants! {
    /// The sizes and magic of `memtrace_job.h`.
    JOB_HEADER: i64 {
        MEMTRACE_JOB_MAGIC = 0x4A4F_4231,
        MEMTRACE_JOB_WORDS = 48,
    }
}

/// Number of int32 words in the job mailbox.
pub const JOB_WORDS: usize = MEMTRACE_JOB_WORDS as usize;

// The last words used (pad_after) fit the mailbox.
const _: () = assert!(JOB_PAD_AFTER + 4 <= JOB_WORDS);

c_constants! {
    /// The word indices of the job mailbox (`enum memtrace_job_word`).
    JOB_LAYOUT: usize {
        JOB_MAGIC = 0,
        JOB_OP = 1,
        JOB_DTYPE = 2,
        JOB_INPUT = 3,
        JOB_FILTER = 7,
        JOB_OUTPUT = 11,
        JOB_STRIDE_H = 15,
        JOB_STRIDE_W = 16,
        JOB_DILATION_H = 17,
        JOB_DILATION_W = 18,
        JOB_PADDING = 19,
        JOB_PAD_H = 20,
        JOB_PAD_W = 21,
        JOB_DEPTH_MULTIPLIER = 22,
        JOB_ACTIVATION = 23,
        JOB_SEED = 24,
        JOB_AXIS = 25,
        JOB_INPUT2 = 26,
        JOB_PAD_BEFORE = 30,
        JOB_PAD_AFTER = 34,
    }
}
