//! Calling mlx-c directly, for what mlx-rs 0.33 does not wrap (some ops,
//! the distributed engine), with MLX's own error message on failure.
//!
//! mlx-c reports a C++ exception as a non-zero status and hands the message
//! to an error handler. mlx-rs installs one that keeps the message for its
//! own calls only; [`forwarding_error_handler`] keeps it for [`call`] too,
//! then passes it on, so mlx-rs's calls report their errors as before.

use std::cell::RefCell;
use std::ffi::{c_char, c_void, CStr};
use std::sync::Once;

use mlx_rs::{Array, Stream};

use crate::error::strip_source_location;

thread_local! {
    /// The last message mlx-c reported on this thread (see [`call`]).
    static LAST_MESSAGE: RefCell<Option<String>> = const { RefCell::new(None) };
}

extern "C" {
    /// mlx-rs's error handler (exported unmangled by mlx-rs 0.33): it stashes
    /// the message for mlx-rs's own calls, which read it after a failure.
    fn default_mlx_error_handler(msg: *const c_char, data: *mut c_void);
}

/// Keeps the message for [`call`], then hands it to mlx-rs's handler.
extern "C" fn forwarding_error_handler(msg: *const c_char, data: *mut c_void) {
    if !msg.is_null() {
        // SAFETY: mlx-c passes a NUL-terminated message alive for this call.
        let text = unsafe { CStr::from_ptr(msg) }
            .to_string_lossy()
            .into_owned();
        LAST_MESSAGE.with(|m| *m.borrow_mut() = Some(text));
    }
    // SAFETY: the same arguments mlx-c gave this handler, passed on unchanged.
    unsafe { default_mlx_error_handler(msg, data) }
}

static HANDLER: Once = Once::new();

/// Installs [`forwarding_error_handler`] once, after mlx-rs installed its
/// own (it does so on its first checked call; a later installation of its
/// would replace this one, so one such call is made first).
fn install_error_handler() {
    HANDLER.call_once(|| {
        let probe = Array::from_int(0);
        let _ = mlx_rs::ops::abs(&probe);
        // SAFETY: a handler with mlx-c's signature, valid for the process's
        // life; no data pointer, so nothing to free.
        unsafe {
            mlx_sys::mlx_set_error_handler(
                Some(forwarding_error_handler),
                std::ptr::null_mut(),
                None,
            )
        };
    });
}

/// Runs one mlx-c call returning a status; a non-zero status becomes MLX's
/// message (without mlx-c's source location), or "MLX rejected `what`".
pub fn call(what: &str, call: impl FnOnce() -> i32) -> Result<(), String> {
    install_error_handler();
    LAST_MESSAGE.with(|m| m.borrow_mut().take());
    if call() == 0 {
        return Ok(());
    }
    let message = LAST_MESSAGE
        .with(|m| m.borrow_mut().take())
        .unwrap_or_else(|| format!("MLX rejected {what}"));
    Err(strip_source_location(&message).to_string())
}

/// Runs `call(result, stream)`, one mlx-c call writing a new array on this
/// thread's stream, and wraps that array (see [`call`] for the error).
///
/// # Safety
/// `call` must pass its arguments to one mlx-c function that writes a new
/// array into `result` on success and returns its status, with every other
/// argument (arrays, pointers and lengths) valid for the duration of the call.
pub unsafe fn new_array(
    what: &str,
    call: impl FnOnce(*mut mlx_sys::mlx_array, mlx_sys::mlx_stream) -> i32,
) -> Result<Array, String> {
    let stream = Stream::thread_local_or_default();
    let mut res = mlx_sys::mlx_array_new();
    match self::call(what, || call(&mut res, stream.as_ptr())) {
        Ok(()) => Ok(Array::from_ptr(res)),
        Err(message) => {
            mlx_sys::mlx_array_free(res);
            Err(message)
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::device::Device;
    use crate::worker::run_blocking;

    #[test]
    fn a_failed_call_gives_mlx_s_message_and_a_good_one_its_array() {
        let (bad, good) = run_blocking(Device::Cpu, || {
            let a = mlx_rs::Array::from_slice(&[1.0f32, 2.0, 3.0, 4.0], &[4]);
            let reshape = |shape: &'static [i32]| {
                // SAFETY: one mlx-c call; `a` and `shape` outlive it.
                unsafe {
                    super::new_array("reshape", |res, s| {
                        mlx_sys::mlx_reshape(res, a.as_ptr(), shape.as_ptr(), shape.len(), s)
                    })
                }
            };
            let bad = reshape(&[3]).map(|_| ());
            let good = reshape(&[2, 2]).map(|x| x.shape().to_vec());
            Ok((bad, good))
        })
        .unwrap();
        let message = bad.unwrap_err();
        assert!(
            message.contains("[reshape] Cannot reshape array of size 4"),
            "{message}"
        );
        assert!(!message.contains(".cpp:"), "{message}");
        assert_eq!(good.unwrap(), vec![2, 2]);
    }
}
