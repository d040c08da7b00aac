//! A process that exits while a worker is busy with MLX must exit cleanly:
//! `exit(3)` destroys libmlx's static objects (its allocator's buffer cache
//! among them), and a worker that went on freeing arrays then wrote into
//! freed memory (a segfault in `std::_Rb_tree_insert_and_rebalance`, or
//! glibc's "malloc_consolidate(): unaligned fastbin chunk detected").
//! `ex_mlx_core::worker` stops its workers first (`stop_workers_at_exit`).
//!
//! Its own main, without libtest's harness (Cargo.toml): the test runs
//! copies of this executable that exit in the middle of the work.

use std::process::Command;
use std::time::Duration;

use ex_mlx_core::device::Device;
use ex_mlx_core::worker;

/// Set in the copies that do the work and exit.
const CHILD: &str = "EX_MLX_EXIT_WHILE_BUSY_CHILD";

fn main() {
    if std::env::var_os(CHILD).is_some() {
        return work_then_exit();
    }
    let runs = 30;
    let exe = std::env::current_exe().expect("this test's executable");
    let mut failures = Vec::new();
    for run in 0..runs {
        let output = Command::new(&exe)
            .env(CHILD, "1")
            .output()
            .expect("a copy of this test runs");
        if !output.status.success() {
            failures.push(format!(
                "run {run}: {} {}",
                output.status,
                String::from_utf8_lossy(&output.stderr).trim()
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "exits that failed:\n{}",
        failures.join("\n")
    );
    println!("exit_while_busy: ok ({runs} exits in the middle of MLX work)");
}

/// Keeps the CPU worker allocating and freeing arrays, and exits while it
/// does (with jobs still queued).
fn work_then_exit() {
    // the worker started, its first job done
    worker::run_blocking(Device::Cpu, || Ok(())).expect("the CPU worker");
    let start = std::time::Instant::now();
    while start.elapsed() < Duration::from_millis(30) {
        for _ in 0..64 {
            let queued = worker::submit(
                Device::Cpu,
                Box::new(|| {
                    let a = mlx_rs::Array::from_slice(&[1.0f32; 1024], &[1024]);
                    if let Ok(b) = mlx_rs::ops::add(&a, &a) {
                        let _ = b.eval();
                    }
                }),
            );
            queued.expect("a job queued");
        }
        std::thread::yield_now();
    }
    std::process::exit(0);
}
