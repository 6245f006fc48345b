//! `memtrace bench`: placeholder replaced below.
