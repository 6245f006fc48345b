# Reads `objdump -dr` of an object and fails (exit 1) when a function calls
# or jumps to itself: a libc shim that GCC compiled into a call to its own
# name, which recurses until the stack overflows (rt/libc_shims.c).
/^[0-9a-f]+ <[^>]+>:$/ {
    fn = $2
    gsub(/[<>:]/, "", fn)
}
/R_(ARM_THM_CALL|ARM_THM_JUMP24|ARM_CALL|ARM_JUMP24|X86_64_PLT32|X86_64_PC32)/ {
    target = $NF
    sub(/[-+].*/, "", target)
    if (target == fn) {
        print "  " fn " calls itself"
        bad = 1
    }
}
END { exit bad }
