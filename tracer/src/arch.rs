//! Everything that differs between the emulated architectures, in one place:
//! how the engine is created, where execution starts, how a call's return
//! address is found, what an interrupt number means, and how blocks are
//! clocked. The rest of the tracer asks [`Arch`] (through [`Machine`])
//! instead of matching on it.

use unicorn_engine::{Arch as UcArch, ArmCpuModel, Mode, RegisterARM, RegisterX86, Unicorn};

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
    /// return address: `bl` (4 bytes, LR) or `call rel32` (5 bytes, top of
    /// stack). `read` reads guest memory.
    fn caller<D>(
        self,
        uc: &Unicorn<'_, D>,
        read: impl Fn(&Unicorn<'_, D>, u64, &mut [u8]) -> Result<(), unicorn_engine::uc_error>,
    ) -> Option<u64>;

    /// The stack pointer (0 if it cannot be read).
    fn stack_pointer<D>(self, uc: &Unicorn<'_, D>) -> u64;

    /// The integer registers by DWARF register number, for unwinding
    /// (`unwind.rs`): r0–r15 on a Cortex-M; on x86-64 rax, rdx, rcx, rbx,
    /// rsi, rdi, rbp, rsp, r8–r15 (0–15) and the return-address column 16,
    /// which holds RIP. `pc` is the current instruction, as the hook that
    /// asks knows it.
    fn registers<D>(self, uc: &Unicorn<'_, D>, pc: u64) -> Registers;

    /// The DWARF number of the stack pointer (r13, rsp).
    fn dwarf_sp(self) -> u16;

    /// The DWARF column that holds the program counter while unwinding (r15;
    /// on x86-64 the return-address column 16).
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
}

impl Machine for Arch {
    fn new_engine<'a, D>(self, data: D) -> Result<Unicorn<'a, D>, TraceError> {
        let emu = |what: &str, e| TraceError::Emulator(format!("{what}: {e:?}"));
        match self {
            Arch::X86_64 => Unicorn::new_with_data(UcArch::X86, Mode::MODE_64, data)
                .map_err(|e| emu("creating the x86-64 emulator", e)),
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
            Arch::X86_64 => entry,
            _ => entry | 1,
        }
    }

    fn block_clock(self) -> BlockClock {
        match self {
            Arch::X86_64 => BlockClock::x86_64(),
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
            _ => uc
                .reg_read(RegisterARM::LR)
                .ok()
                .map(|lr| (lr & !1).wrapping_sub(4)),
        }
    }

    fn stack_pointer<D>(self, uc: &Unicorn<'_, D>) -> u64 {
        match self {
            Arch::X86_64 => uc.reg_read(RegisterX86::RSP),
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
            _ => 13,
        }
    }

    fn dwarf_pc(self) -> u16 {
        match self {
            Arch::X86_64 => 16,
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
            Arch::X86_64 => address,
            _ => address & !1,
        }
    }

    fn clear_stale_it_state<D>(self, uc: &mut Unicorn<'_, D>) {
        if self.is_cortex_m() {
            const THUMB: u64 = 1 << 24;
            let _ = uc.reg_write(RegisterARM::EPSR, THUMB);
        }
    }

    fn interrupt_name(self, number: u32) -> &'static str {
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

/// DWARF register columns the unwinder tracks (see [`Machine::registers`]).
const COLUMNS: usize = 17;

/// Integer register values by DWARF register number; `None` is unknown.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Registers([Option<u64>; COLUMNS]);

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
        Arch::CortexM33 => ArmCpuModel::CORTEX_M33,
        Arch::CortexM4 | Arch::X86_64 => ArmCpuModel::CORTEX_M4,
    }
}
