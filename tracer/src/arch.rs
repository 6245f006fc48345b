//! Everything that differs between the emulated architectures, in one place:
//! how the engine is created, where execution starts, how a call's return
//! address is found, what an interrupt number means, and how blocks are
//! clocked. The rest of the tracer asks [`Arch`] (through [`Machine`])
//! instead of matching on it.

use unicorn_engine::{
    Arch as UcArch, ArmCpuModel, Mode, RegisterARM, RegisterRISCV, RegisterX86, Riscv32CpuModel,
    Unicorn,
};

use crate::clock::BlockClock;
use crate::error::TraceError;
use memtrace_abi::target::Arch;

/// What differs per architecture in the emulator (an extension of
/// [`Arch`], which `abi` defines).
pub(crate) trait Machine {
    /// A bare Unicorn engine of this architecture carrying `data`.
    fn new_engine<'a, D>(self, data: D) -> Result<Unicorn<'a, D>, TraceError>;

    /// Where execution of an entry point starts (Thumb code at an odd address).
    fn start_address(self, entry: u64) -> u64;

    /// The block clock that counts this architecture's instructions.
    fn block_clock(self) -> BlockClock;

    /// The call instruction that entered the current function, from its
    /// return address: `bl` (4 bytes, LR), `jal`/`jalr` (4 bytes, ra) or
    /// their compressed forms (2 bytes), or `call rel32` (5 bytes, top of
    /// stack). `read` reads guest memory.
    fn caller<D>(
        self,
        uc: &Unicorn<'_, D>,
        read: impl Fn(&Unicorn<'_, D>, u64, &mut [u8]) -> Result<(), unicorn_engine::uc_error>,
    ) -> Option<u64>;

    /// The return address of the current call, just after a call
    /// instruction (LR, ra, or the top of the stack on x86-64), as the
    /// caller of a jump that went astray.
    fn return_address<D>(self, uc: &Unicorn<'_, D>) -> Option<u64>;

    /// The stack pointer (0 if it cannot be read).
    fn stack_pointer<D>(self, uc: &Unicorn<'_, D>) -> u64;

    /// The integer registers by DWARF register number, for unwinding
    /// (`unwind.rs`): r0–r15 on a Cortex-M; x0–x31 on RISC-V, and column
    /// 32 for the PC (RISC-V's return-address column is ra, x1); on x86-64
    /// rax, rdx, rcx, rbx, rsi, rdi, rbp, rsp, r8–r15 (0–15) and the
    /// return-address column 16, which holds RIP. `pc` is the current
    /// instruction, as the hook that asks knows it.
    fn registers<D>(self, uc: &Unicorn<'_, D>, pc: u64) -> Registers;

    /// The DWARF number of the stack pointer (r13, x2, rsp).
    fn dwarf_sp(self) -> u16;

    /// The DWARF column that holds the program counter while unwinding (r15;
    /// on RISC-V column 32, past the integer registers; on x86-64 the
    /// return-address column 16).
    fn dwarf_pc(self) -> u16;

    /// Bytes of a saved register on the stack.
    fn word_bytes(self) -> usize;

    /// A code address without mode bits (the Thumb bit of a return address).
    fn code_address(self, address: u64) -> u64;

    /// Clears the Thumb IT state that Unicorn's PC synchronisation leaves
    /// behind; after every hook that made Unicorn restore the state of the
    /// instruction it interrupted (nothing to clear on x86-64).
    ///
    /// A memory hook or the TLB fill of a data access makes Unicorn restore
    /// the CPU state of the accessing instruction, IT bits included, and
    /// nothing resets them when the block leaves the IT block, so the next
    /// block would run as if still inside it (unicorn-engine/unicorn#2309;
    /// `harness-c/guests/it_block.c` shows it). Writing EPSR changes only the
    /// IT and T bits. A block that ends inside an IT block stores its own IT
    /// state at its end, so zero is right after a data access. Never call it
    /// on the TLB fill of a fetch: nothing was restored then, and the IT
    /// state is the live one a block stored on ending inside an IT block.
    fn clear_stale_it_state<D>(self, uc: &mut Unicorn<'_, D>);

    /// What Unicorn's interrupt `number` means on this architecture.
    fn interrupt_name(self, number: u32) -> &'static str;

    /// Whether the block `code` at `address` is one unconditional branch
    /// to itself — Thumb `b .` (`e7fe`, newlib's nosys `_exit`, a
    /// `while (1);`) or `b.w .`, RISC-V `j .` or `c.j .`, x86-64 `jmp $` —
    /// which nothing can leave: memtrace raises no interrupt. `read` reads
    /// guest memory; a Thumb branch an IT instruction just before may make
    /// conditional is not taken for one. Called once per new block, so it
    /// costs nothing on the hot path.
    fn loops_forever(
        self,
        address: u64,
        code: &[u8],
        read: impl Fn(u64, &mut [u8]) -> bool,
    ) -> bool;
}

/// Thumb's `b .` (T2, `e7fe`) and `b.w .` (T4, `f7ff bffe`), as bytes.
const THUMB_SELF_BRANCHES: [&[u8]; 2] = [&[0xFE, 0xE7], &[0xFF, 0xF7, 0xFE, 0xBF]];
/// RISC-V's `j .` (`jal x0, 0`), `beq x0, x0, .` and `c.j .`.
const RISCV_SELF_BRANCHES: [&[u8]; 3] = [
    &[0x6F, 0x00, 0x00, 0x00],
    &[0x63, 0x00, 0x00, 0x00],
    &[0x01, 0xA0],
];
/// x86-64's `jmp $` (`eb fe`) and its rel32 form.
const X86_64_SELF_BRANCHES: [&[u8]; 2] = [&[0xEB, 0xFE], &[0xE9, 0xFB, 0xFF, 0xFF, 0xFF]];

/// Whether an IT instruction (`bfxy`, mask `y` not 0) may stand among the
/// halfwords just before a Thumb instruction (an IT block covers up to
/// four instructions of up to four bytes), so that it may be conditional.
/// A halfword that is only the second half of a wide instruction may look
/// like one: then a real loop is left to the budget, never the reverse.
fn thumb_it_may_cover(address: u64, read: impl Fn(u64, &mut [u8]) -> bool) -> bool {
    (1..=8u64).any(|k| {
        let mut hw = [0u8; 2];
        address >= 2 * k && read(address - 2 * k, &mut hw) && hw[1] == 0xBF && hw[0] & 0x0F != 0
    })
}

impl Machine for Arch {
    fn new_engine<'a, D>(self, data: D) -> Result<Unicorn<'a, D>, TraceError> {
        let emu = |what: &str, e| TraceError::Emulator(format!("{what}: {e:?}"));
        match self {
            Arch::X86_64 => Unicorn::new_with_data(UcArch::X86, Mode::MODE_64, data)
                .map_err(|e| emu("creating the x86-64 emulator", e)),
            Arch::Riscv32 => {
                let mut uc = Unicorn::new_with_data(UcArch::RISCV, Mode::RISCV32, data)
                    .map_err(|e| emu("creating the RISC-V emulator", e))?;
                // The generic RV32 core: RV32GC, so it runs RV32IMAC code
                // (and RV32IMC, a subset) as built.
                uc.ctl_set_cpu_model(Riscv32CpuModel::ANY as i32)
                    .map_err(|e| emu("selecting the RV32 CPU model", e))?;
                Ok(uc)
            }
            core => {
                let mut uc = Unicorn::new_with_data(UcArch::ARM, Mode::THUMB, data)
                    .map_err(|e| emu("creating the ARM emulator", e))?;
                // Mode::MCLASS would force a Cortex-M33; choose the core
                // explicitly (it decides which instructions exist: no
                // Thumb-2 on the M0, no DSP on the M3, no FPU on either).
                uc.ctl_set_cpu_model(cpu_model(core) as i32)
                    .map_err(|e| emu(&format!("selecting the {core} CPU model"), e))?;
                // The start-up code sets SP itself; a poisoned LR only keeps
                // a return from the entry point readable as a fault.
                let _ = uc.reg_write(RegisterARM::LR, 0xFFFF_FFFF);
                Ok(uc)
            }
        }
    }

    fn start_address(self, entry: u64) -> u64 {
        match self {
            Arch::X86_64 | Arch::Riscv32 => entry,
            _ => entry | 1,
        }
    }

    fn block_clock(self) -> BlockClock {
        match self {
            Arch::X86_64 => BlockClock::x86_64(),
            Arch::Riscv32 => BlockClock::riscv(),
            _ => BlockClock::thumb(),
        }
    }

    fn caller<D>(
        self,
        uc: &Unicorn<'_, D>,
        read: impl Fn(&Unicorn<'_, D>, u64, &mut [u8]) -> Result<(), unicorn_engine::uc_error>,
    ) -> Option<u64> {
        match self {
            Arch::X86_64 => {
                let sp = uc.reg_read(RegisterX86::RSP).ok()?;
                let mut ret = [0u8; 8];
                read(uc, sp, &mut ret).ok()?;
                Some(u64::from_le_bytes(ret).wrapping_sub(5))
            }
            Arch::Riscv32 => {
                let ra = uc.reg_read(RegisterRISCV::RA).ok()?;
                let mut before = [0u8; 4];
                read(uc, ra.wrapping_sub(4), &mut before).ok()?;
                Some(ra.wrapping_sub(riscv_call_length(u32::from_le_bytes(before))))
            }
            _ => uc
                .reg_read(RegisterARM::LR)
                .ok()
                .map(|lr| (lr & !1).wrapping_sub(4)),
        }
    }

    fn return_address<D>(self, uc: &Unicorn<'_, D>) -> Option<u64> {
        match self {
            Arch::X86_64 => {
                let sp = uc.reg_read(RegisterX86::RSP).ok()?;
                let mut ret = [0u8; 8];
                uc.mem_read(sp, &mut ret).ok()?;
                Some(u64::from_le_bytes(ret))
            }
            Arch::Riscv32 => uc.reg_read(RegisterRISCV::RA).ok(),
            _ => uc.reg_read(RegisterARM::LR).ok(),
        }
    }

    fn stack_pointer<D>(self, uc: &Unicorn<'_, D>) -> u64 {
        match self {
            Arch::X86_64 => uc.reg_read(RegisterX86::RSP),
            Arch::Riscv32 => uc.reg_read(RegisterRISCV::SP),
            _ => uc.reg_read(RegisterARM::SP),
        }
        .unwrap_or(0)
    }

    fn registers<D>(self, uc: &Unicorn<'_, D>, pc: u64) -> Registers {
        let mut regs = Registers::default();
        match self {
            Arch::X86_64 => {
                use RegisterX86::*;
                let all = [
                    RAX, RDX, RCX, RBX, RSI, RDI, RBP, RSP, R8, R9, R10, R11, R12, R13, R14, R15,
                ];
                for (n, reg) in all.into_iter().enumerate() {
                    regs.set(n as u16, uc.reg_read(reg).ok());
                }
            }
            Arch::Riscv32 => {
                // x0..x31 are consecutive in Unicorn's numbering.
                let x0 = RegisterRISCV::X0 as i32;
                for n in 0..32 {
                    regs.set(n as u16, uc.reg_read(x0 + n).ok());
                }
            }
            _ => {
                use RegisterARM::*;
                let all = [
                    R0, R1, R2, R3, R4, R5, R6, R7, R8, R9, R10, R11, R12, SP, LR,
                ];
                for (n, reg) in all.into_iter().enumerate() {
                    regs.set(n as u16, uc.reg_read(reg).ok());
                }
            }
        }
        regs.set(self.dwarf_pc(), Some(pc));
        regs
    }

    fn dwarf_sp(self) -> u16 {
        match self {
            Arch::X86_64 => 7,
            Arch::Riscv32 => 2,
            _ => 13,
        }
    }

    fn dwarf_pc(self) -> u16 {
        match self {
            Arch::X86_64 => 16,
            Arch::Riscv32 => 32,
            _ => 15,
        }
    }

    fn word_bytes(self) -> usize {
        match self {
            Arch::X86_64 => 8,
            _ => 4,
        }
    }

    fn code_address(self, address: u64) -> u64 {
        match self {
            Arch::X86_64 | Arch::Riscv32 => address,
            _ => address & !1,
        }
    }

    fn clear_stale_it_state<D>(self, uc: &mut Unicorn<'_, D>) {
        if self.is_cortex_m() {
            const THUMB: u64 = 1 << 24;
            let _ = uc.reg_write(RegisterARM::EPSR, THUMB);
        }
    }

    fn loops_forever(
        self,
        address: u64,
        code: &[u8],
        read: impl Fn(u64, &mut [u8]) -> bool,
    ) -> bool {
        match self {
            Arch::X86_64 => X86_64_SELF_BRANCHES.contains(&code),
            Arch::Riscv32 => RISCV_SELF_BRANCHES.contains(&code),
            _ => THUMB_SELF_BRANCHES.contains(&code) && !thumb_it_may_cover(address, read),
        }
    }

    fn interrupt_name(self, number: u32) -> &'static str {
        if self == Arch::Riscv32 {
            return riscv_exception_name(number);
        }
        match (self.is_cortex_m(), number) {
            (true, 1) => "undefined instruction",
            (true, 2) => "supervisor call (SVC)",
            (true, 3) | (true, 4) => "memory abort",
            (true, 7) => "breakpoint (BKPT)",
            (false, 3) => "breakpoint (int3)",
            (false, 6) => "invalid opcode",
            (false, 13) => "general protection fault",
            (false, 14) => "page fault",
            _ => "exception",
        }
    }
}

/// What a RISC-V trap cause (Unicorn's interrupt number) means, from the
/// privileged specification's exception codes.
fn riscv_exception_name(cause: u32) -> &'static str {
    match cause {
        0 => "instruction address misaligned",
        1 => "instruction access fault",
        2 => "illegal instruction",
        3 => "breakpoint (ebreak)",
        4 => "load address misaligned",
        5 => "load access fault",
        6 => "store address misaligned",
        7 => "store access fault",
        8 | 9 | 11 => "environment call (ecall)",
        12 => "instruction page fault",
        13 => "load page fault",
        15 => "store page fault",
        _ => "exception",
    }
}

/// Bytes of the call instruction that ends just before a return address,
/// given the 4 bytes before it: 4 for `jal`/`jalr` linking ra, 2 for the
/// compressed `c.jal`/`c.jalr` (which link ra implicitly), 4 when neither
/// decodes (a tail of something else; the frame is then approximate).
fn riscv_call_length(before: u32) -> u64 {
    let opcode = before & 0x7f;
    let rd = (before >> 7) & 0x1f;
    if matches!(opcode, 0x6f | 0x67) && rd == 1 {
        return 4;
    }
    let last = (before >> 16) as u16;
    let c_jal = last & 0xe003 == 0x2001;
    let c_jalr = last & 0xf07f == 0x9002 && (last >> 7) & 0x1f != 0;
    if c_jal || c_jalr {
        2
    } else {
        4
    }
}

/// DWARF register columns the unwinder tracks (see [`Machine::registers`]).
const COLUMNS: usize = 33;

/// Integer register values by DWARF register number; `None` is unknown.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Registers([Option<u64>; COLUMNS]);

impl Default for Registers {
    /// Every column unknown.
    fn default() -> Self {
        Registers([None; COLUMNS])
    }
}

impl Registers {
    /// The value of column `n`, if known.
    pub(crate) fn get(&self, n: u16) -> Option<u64> {
        self.0.get(n as usize).copied().flatten()
    }

    /// Sets column `n` (columns past the tracked ones are ignored).
    pub(crate) fn set(&mut self, n: u16, value: Option<u64>) {
        if let Some(slot) = self.0.get_mut(n as usize) {
            *slot = value;
        }
    }
}

/// Unicorn's CPU model of a Cortex-M core (x86-64 has none to choose).
fn cpu_model(core: Arch) -> ArmCpuModel {
    match core {
        Arch::CortexM0 => ArmCpuModel::CORTEX_M0,
        Arch::CortexM3 => ArmCpuModel::CORTEX_M3,
        Arch::CortexM7 => ArmCpuModel::CORTEX_M7,
        // Not run: sessions refuse the core first (`Arch::unicorn_has`).
        Arch::CortexM33 | Arch::CortexM55 => ArmCpuModel::CORTEX_M33,
        Arch::CortexM4 | Arch::Riscv32 | Arch::X86_64 => ArmCpuModel::CORTEX_M4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Memory holding nothing before a block (no IT instruction).
    fn nothing_before(_: u64, out: &mut [u8]) -> bool {
        out.fill(0);
        true
    }

    #[test]
    fn a_branch_to_itself_is_one_on_each_architecture_and_a_longer_block_is_not() {
        let m4 = Arch::CortexM4;
        assert!(m4.loops_forever(0x100, &[0xFE, 0xE7], nothing_before));
        assert!(m4.loops_forever(0x100, &[0xFF, 0xF7, 0xFE, 0xBF], nothing_before));
        // `b .-2` is a loop of two instructions, and `b .` after another
        // instruction in one block runs that one every time: neither.
        assert!(!m4.loops_forever(0x100, &[0xFD, 0xE7], nothing_before));
        assert!(!m4.loops_forever(0x100, &[0x00, 0xBF, 0xFE, 0xE7], nothing_before));
        let rv = Arch::Riscv32;
        assert!(rv.loops_forever(0x100, &[0x6F, 0, 0, 0], nothing_before));
        assert!(rv.loops_forever(0x100, &[0x01, 0xA0], nothing_before));
        // `jal ra, .` writes ra: not side-effect free.
        assert!(!rv.loops_forever(0x100, &[0xEF, 0, 0, 0], nothing_before));
        let x86 = Arch::X86_64;
        assert!(x86.loops_forever(0x100, &[0xEB, 0xFE], nothing_before));
        assert!(x86.loops_forever(0x100, &[0xE9, 0xFB, 0xFF, 0xFF, 0xFF], nothing_before));
        assert!(!x86.loops_forever(0x100, &[0xEB, 0xFD], nothing_before));
    }

    #[test]
    fn a_thumb_branch_an_it_instruction_may_make_conditional_is_left_to_the_budget() {
        // `it eq` (bf08) two bytes before: the `b .` runs only on EQ.
        let it_before = |at: u64, out: &mut [u8]| {
            out.copy_from_slice(if at == 0xFE { &[0x08, 0xBF] } else { &[0, 0] });
            true
        };
        assert!(!Arch::CortexM4.loops_forever(0x100, &[0xFE, 0xE7], it_before));
        // A `nop` (bf00) is no IT instruction.
        let nop_before = |_: u64, out: &mut [u8]| {
            out.copy_from_slice(&[0x00, 0xBF]);
            true
        };
        assert!(Arch::CortexM4.loops_forever(0x100, &[0xFE, 0xE7], nop_before));
    }
}
