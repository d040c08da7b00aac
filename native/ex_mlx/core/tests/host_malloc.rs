//! `memory::tune_host_malloc`, alone in its test executable and without
//! libtest's harness (Cargo.toml): glibc's malloc statistics are global to
//! the process, so this runs on the main thread with nothing else
//! allocating.

fn main() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    after_tuning_a_large_block_comes_from_the_heap();
    println!("host_malloc: ok");
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn after_tuning_a_large_block_comes_from_the_heap() {
    use ex_mlx_core::memory::{tune_host_malloc, MALLOC_MMAP_THRESHOLD};

    // mmapped blocks in use while a block of `bytes` is allocated, less before
    let mmapped_by = |bytes: usize| -> usize {
        // SAFETY: the block is allocated, checked non-null and freed here;
        // mallinfo2 only reads the allocator's counters.
        unsafe {
            let before = libc::mallinfo2().hblks;
            // (black_box: the compiler may not drop a block it sees unused)
            let block = std::hint::black_box(libc::malloc(bytes));
            assert!(!block.is_null());
            let during = libc::mallinfo2().hblks;
            libc::free(std::hint::black_box(block));
            during - before
        }
    };
    let large = MALLOC_MMAP_THRESHOLD - (4 << 20);
    // With thresholds fixed at glibc's starting 128 KiB (where the BEAM
    // leaves them) and the heap's free top returned, the block is mapped.
    // SAFETY: sets malloc parameters (as tune_host_malloc does) and trims
    // the heap's free memory.
    unsafe {
        assert_eq!(libc::mallopt(libc::M_MMAP_THRESHOLD, 128 << 10), 1);
        assert_eq!(libc::mallopt(libc::M_TRIM_THRESHOLD, 128 << 10), 1);
        libc::malloc_trim(0);
    }
    assert_eq!(mmapped_by(large), 1);
    assert!(tune_host_malloc());
    assert_eq!(mmapped_by(large), 0);
    assert_eq!(mmapped_by(large), 0);
    // above the threshold, blocks are still mapped (and returned at free)
    assert_eq!(mmapped_by(MALLOC_MMAP_THRESHOLD + (1 << 20)), 1);
}
