//! A process that exits while a worker is busy with MLX must exit cleanly:
//! `exit(3)` destroys libmlx's static objects (its allocator's buffer cache
//! among them), and a worker that went on freeing arrays then wrote into
//! freed memory (a segfault in `std::_Rb_tree_insert_and_rebalance`, or
//! glibc's "malloc_consolidate(): unaligned fastbin chunk detected").
//! `ex_mlx_core::exit` stops its workers first (`stop_workers_at_exit`),
//! also when the thread that exits is itself a worker.
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
    match std::env::var(CHILD).as_deref() {
        Ok("main") => return work_then_exit(Device::Cpu, Exit::FromMain),
        Ok("worker") => {
            // another stream's worker is busy; the CPU worker exits
            let busy = worker::new_stream(Device::Cpu).expect("a CPU stream");
            return work_then_exit(busy, Exit::FromWorker(Device::Cpu));
        }
        _ => {}
    }
    let runs = 30;
    let exe = std::env::current_exe().expect("this test's executable");
    let mut failures = Vec::new();
    for mode in ["main", "worker"] {
        for run in 0..runs {
            let output = Command::new(&exe)
                .env(CHILD, mode)
                .output()
                .expect("a copy of this test runs");
            if !output.status.success() {
                failures.push(format!(
                    "{mode} run {run}: {} {}",
                    output.status,
                    String::from_utf8_lossy(&output.stderr).trim()
                ));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "exits that failed:\n{}",
        failures.join("\n")
    );
    println!(
        "exit_while_busy: ok ({runs} exits from the main thread and {runs} from a worker, \
         in the middle of MLX work)"
    );
}

/// Which thread calls `exit(3)`.
enum Exit {
    FromMain,
    /// A job on this device's worker (MLX's reference BLAS ends a process
    /// that way, from the thread that called it).
    FromWorker(Device),
}

/// Keeps the worker of `busy` allocating and freeing arrays, and exits
/// while it does (with jobs still queued).
fn work_then_exit(busy: Device, exit: Exit) {
    // the workers started, their first jobs done
    worker::run_blocking(busy, || Ok(())).expect("the busy worker");
    worker::run_blocking(Device::Cpu, || Ok(())).expect("the CPU worker");
    let start = std::time::Instant::now();
    while start.elapsed() < Duration::from_millis(30) {
        for _ in 0..64 {
            let queued = worker::submit(
                busy,
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
    match exit {
        Exit::FromMain => std::process::exit(0),
        Exit::FromWorker(device) => {
            let _ = worker::run_blocking(device, || -> ex_mlx_core::error::Result<()> {
                std::process::exit(0)
            });
            unreachable!("the process exited");
        }
    }
}
