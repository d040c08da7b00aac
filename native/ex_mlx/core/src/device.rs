//! Devices as Elixir names them (`:cpu`, `:gpu`, and a stream of one,
//! `{:gpu, n}`) and as MLX does.

/// The kind of a device: what MLX computes on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    Cpu,
    Gpu,
}

/// Where a tensor's work runs: a device kind and one of its streams. Stream
/// 0 is the device's default stream (`:cpu`, `:gpu`); streams made by
/// `ExMLX.Stream.new/1` are numbered from 1 (`{:gpu, 1}`). Each has a worker
/// thread of its own (`crate::worker`), so one stream's work never waits
/// for another's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Device {
    kind: Kind,
    stream: u32,
}

#[allow(non_upper_case_globals)]
impl Device {
    /// The CPU's default stream.
    pub const Cpu: Device = Device {
        kind: Kind::Cpu,
        stream: 0,
    };
    /// The GPU's default stream.
    pub const Gpu: Device = Device {
        kind: Kind::Gpu,
        stream: 0,
    };

    pub const ALL: [Device; 2] = [Device::Cpu, Device::Gpu];

    pub fn kind(self) -> Kind {
        self.kind
    }

    /// The stream's number: 0 for the default one.
    pub fn stream(self) -> u32 {
        self.stream
    }

    /// Stream `stream` of this device's kind.
    pub fn on_stream(self, stream: u32) -> Device {
        Device {
            kind: self.kind,
            stream,
        }
    }

    /// The name of the device's kind: "cpu" or "gpu".
    pub fn name(self) -> &'static str {
        match self.kind {
            Kind::Cpu => "cpu",
            Kind::Gpu => "gpu",
        }
    }

    /// How messages name it: "gpu", or "gpu stream 1".
    pub fn describe(self) -> String {
        match self.stream {
            0 => self.name().to_string(),
            n => format!("{} stream {n}", self.name()),
        }
    }

    pub fn to_mlx(self) -> mlx_rs::Device {
        match self.kind {
            Kind::Cpu => mlx_rs::Device::cpu(),
            Kind::Gpu => mlx_rs::Device::gpu(),
        }
    }

    /// mlx-c's device type of the kind.
    pub fn mlx_type(self) -> mlx_sys::mlx_device_type {
        match self.kind {
            Kind::Cpu => mlx_sys::mlx_device_type__MLX_CPU,
            Kind::Gpu => mlx_sys::mlx_device_type__MLX_GPU,
        }
    }

    /// Whether this MLX build can run on the device (Metal on macOS, CUDA on Linux).
    pub fn is_available(self) -> bool {
        let mut available = false;
        // SAFETY: the device handle is created, used and freed here and nowhere
        // else; `available` is a live bool the call writes through. mlx-c catches
        // C++ exceptions and reports them as a non-zero status.
        let status = unsafe {
            let device = mlx_sys::mlx_device_new_type(self.mlx_type(), 0);
            let status = mlx_sys::mlx_device_is_available(&mut available, device);
            mlx_sys::mlx_device_free(device);
            status
        };
        status == 0 && available
    }

    /// Whether this thread's MLX stream (a worker's, while it runs a job)
    /// computes on the CPU.
    pub fn current_is_cpu() -> bool {
        let stream = mlx_rs::Stream::thread_local_or_default();
        let mut kind = mlx_sys::mlx_device_type__MLX_GPU;
        // SAFETY: `stream` is alive for the calls; the device handle is
        // created by the first call, read by the second and freed here;
        // `kind` is a live value the second call writes through.
        let status = unsafe {
            let mut device = mlx_sys::mlx_device_new();
            let status = mlx_sys::mlx_stream_get_device(&mut device, stream.as_ptr());
            let status = if status == 0 {
                mlx_sys::mlx_device_get_type(&mut kind, device)
            } else {
                status
            };
            mlx_sys::mlx_device_free(device);
            status
        };
        status == 0 && kind == mlx_sys::mlx_device_type__MLX_CPU
    }

    /// The default stream of the device named `name` ("cpu" or "gpu").
    pub fn from_name(name: &str) -> Option<Device> {
        Device::ALL.into_iter().find(|d| d.name() == name)
    }
}

/// Whether `dtype` can live on `device`: MLX computes float64 on the CPU only.
pub fn check_dtype(dtype: mlx_rs::Dtype, device: Device) -> crate::Result<()> {
    if dtype == mlx_rs::Dtype::Float64 && device.kind() == Kind::Gpu {
        return Err(crate::Error::Type(
            "{:f, 64} is not supported on the gpu device (MLX computes float64 on the CPU only); \
             use the cpu device, or {:f, 32}"
                .into(),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f64_is_cpu_only() {
        assert!(check_dtype(mlx_rs::Dtype::Float64, Device::Cpu).is_ok());
        let e = check_dtype(mlx_rs::Dtype::Float64, Device::Gpu).unwrap_err();
        assert!(e
            .to_string()
            .starts_with("{:f, 64} is not supported on the gpu device"));
        assert!(check_dtype(mlx_rs::Dtype::Float32, Device::Gpu).is_ok());
    }

    #[test]
    fn streams_keep_their_kind() {
        let s = Device::Gpu.on_stream(3);
        assert_eq!((s.kind(), s.stream(), s.name()), (Kind::Gpu, 3, "gpu"));
        assert_eq!(s.describe(), "gpu stream 3");
        assert_ne!(s, Device::Gpu);
        assert!(check_dtype(mlx_rs::Dtype::Float64, s).is_err());
        assert!(check_dtype(mlx_rs::Dtype::Float64, Device::Cpu.on_stream(1)).is_ok());
    }

    #[test]
    fn names_round_trip() {
        for d in Device::ALL {
            assert_eq!(Device::from_name(d.name()), Some(d));
        }
        assert_eq!(Device::from_name("tpu"), None);
    }
}
