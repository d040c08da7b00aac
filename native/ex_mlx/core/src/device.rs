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
