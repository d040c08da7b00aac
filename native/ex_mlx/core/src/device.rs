//! Devices as Elixir names them (`:cpu`, `:gpu`) and as MLX does.

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Device {
    Cpu,
    Gpu,
}

impl Device {
    pub const ALL: [Device; 2] = [Device::Cpu, Device::Gpu];

    pub fn name(self) -> &'static str {
        match self {
            Device::Cpu => "cpu",
            Device::Gpu => "gpu",
        }
    }

    pub fn index(self) -> usize {
        match self {
            Device::Cpu => 0,
            Device::Gpu => 1,
        }
    }

    pub fn to_mlx(self) -> mlx_rs::Device {
        match self {
            Device::Cpu => mlx_rs::Device::cpu(),
            Device::Gpu => mlx_rs::Device::gpu(),
        }
    }

    /// Whether this MLX build can run on the device (Metal on macOS, CUDA on Linux).
    pub fn is_available(self) -> bool {
        let kind = match self {
            Device::Cpu => mlx_sys::mlx_device_type__MLX_CPU,
            Device::Gpu => mlx_sys::mlx_device_type__MLX_GPU,
        };
        let mut available = false;
        // SAFETY: the device handle is created, used and freed here and nowhere
        // else; `available` is a live bool the call writes through. mlx-c catches
        // C++ exceptions and reports them as a non-zero status.
        let status = unsafe {
            let device = mlx_sys::mlx_device_new_type(kind, 0);
            let status = mlx_sys::mlx_device_is_available(&mut available, device);
            mlx_sys::mlx_device_free(device);
            status
        };
        status == 0 && available
    }

    /// The device named `name` ("cpu" or "gpu").
    pub fn from_name(name: &str) -> Option<Device> {
        Device::ALL.into_iter().find(|d| d.name() == name)
    }
}

/// Whether `dtype` can live on `device`: MLX computes float64 on the CPU only.
pub fn check_dtype(dtype: mlx_rs::Dtype, device: Device) -> crate::Result<()> {
    if dtype == mlx_rs::Dtype::Float64 && device == Device::Gpu {
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
    fn names_round_trip() {
        for d in Device::ALL {
            assert_eq!(Device::from_name(d.name()), Some(d));
        }
        assert_eq!(Device::from_name("tpu"), None);
    }
}
