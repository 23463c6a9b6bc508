//! Where memory lives, in DLPack's vocabulary (`DLDeviceType` + device id).

use std::fmt;

use crate::error::{Error, Result};

/// The `DLDeviceType` values of DLPack 1.3. The discriminants are the ABI values.
#[repr(i32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DeviceKind {
    Cpu = 1,
    Cuda = 2,
    CudaHost = 3,
    OpenCl = 4,
    Vulkan = 7,
    Metal = 8,
    Vpi = 9,
    Rocm = 10,
    RocmHost = 11,
    ExtDev = 12,
    CudaManaged = 13,
    OneApi = 14,
    WebGpu = 15,
    Hexagon = 16,
    Maia = 17,
    Trn = 18,
}

impl DeviceKind {
    pub fn from_raw(raw: i32) -> Option<Self> {
        use DeviceKind::*;
        Some(match raw {
            1 => Cpu,
            2 => Cuda,
            3 => CudaHost,
            4 => OpenCl,
            7 => Vulkan,
            8 => Metal,
            9 => Vpi,
            10 => Rocm,
            11 => RocmHost,
            12 => ExtDev,
            13 => CudaManaged,
            14 => OneApi,
            15 => WebGpu,
            16 => Hexagon,
            17 => Maia,
            18 => Trn,
            _ => return None,
        })
    }

    fn name(self) -> &'static str {
        use DeviceKind::*;
        match self {
            Cpu => "cpu",
            Cuda => "cuda",
            CudaHost => "cuda_host",
            OpenCl => "opencl",
            Vulkan => "vulkan",
            Metal => "metal",
            Vpi => "vpi",
            Rocm => "rocm",
            RocmHost => "rocm_host",
            ExtDev => "ext_dev",
            CudaManaged => "cuda_managed",
            OneApi => "oneapi",
            WebGpu => "webgpu",
            Hexagon => "hexagon",
            Maia => "maia",
            Trn => "trn",
        }
    }

    /// Kinds whose memory each has its own numbered device, so the id in a name is meaningful.
    fn is_numbered(self) -> bool {
        !matches!(
            self,
            DeviceKind::Cpu | DeviceKind::CudaHost | DeviceKind::CudaManaged | DeviceKind::RocmHost
        )
    }
}

/// A device: kind plus the producer's device number (0 for host-like kinds).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Device {
    pub kind: DeviceKind,
    pub id: i32,
}

impl Device {
    pub const CPU: Device = Device {
        kind: DeviceKind::Cpu,
        id: 0,
    };
    pub const CUDA_HOST: Device = Device {
        kind: DeviceKind::CudaHost,
        id: 0,
    };
    pub const CUDA_MANAGED: Device = Device {
        kind: DeviceKind::CudaManaged,
        id: 0,
    };

    pub const fn cuda(id: i32) -> Device {
        Device {
            kind: DeviceKind::Cuda,
            id,
        }
    }

    /// The device a framework's allocator hook names by number (torch's pluggable allocator,
    /// zerohop's C entry points): -1 is the host, N ≥ 0 is CUDA device N. Any other negative
    /// number is refused: taking it for the host would hand device code host memory.
    pub fn from_allocator_index(index: i32) -> Result<Device> {
        match index {
            -1 => Ok(Device::CPU),
            0.. => Ok(Device::cuda(index)),
            _ => Err(Error::Device {
                what: "device".into(),
                reason: format!(
                    "{index} is neither -1 (the host) nor a CUDA device number (0, 1, …)"
                ),
            }),
        }
    }

    /// Validates a raw `DLDevice`.
    pub fn from_raw(device_type: i32, id: i32) -> Result<Self> {
        let kind = DeviceKind::from_raw(device_type).ok_or(Error::UnsupportedDevice {
            device_type,
            device_id: id,
        })?;
        if id < 0 {
            return Err(Error::UnsupportedDevice {
                device_type,
                device_id: id,
            });
        }
        Ok(Device { kind, id })
    }

    /// True when the CPU may dereference pointers on this device directly.
    pub fn is_host_accessible(self) -> bool {
        matches!(
            self.kind,
            DeviceKind::Cpu | DeviceKind::CudaHost | DeviceKind::CudaManaged | DeviceKind::RocmHost
        )
    }

    /// Parses "cpu", "cuda", "cuda:1", "cuda_host", "cuda_managed".
    pub fn parse(text: &str) -> Result<Self> {
        let (name, id) = match text.split_once(':') {
            Some((name, id)) => {
                let id = id.parse::<i32>().map_err(|_| Error::Device {
                    what: "device".into(),
                    reason: format!("{text:?}: device number {id:?} is not an integer"),
                })?;
                (name, Some(id))
            }
            None => (text, None),
        };
        let kind = (1..=18)
            .filter_map(DeviceKind::from_raw)
            .find(|k| k.name() == name)
            .ok_or_else(|| Error::Device {
                what: "device".into(),
                reason: format!("{text:?} is not a device name (try cpu, cuda:0, cuda_host)"),
            })?;
        match id {
            Some(id) if !kind.is_numbered() && id != 0 => Err(Error::Device {
                what: "device".into(),
                reason: format!("{name} memory has no device number other than 0"),
            }),
            Some(id) if id < 0 => Err(Error::Device {
                what: "device".into(),
                reason: format!("{text:?}: device number must not be negative"),
            }),
            Some(id) => Ok(Device { kind, id }),
            None => Ok(Device { kind, id: 0 }),
        }
    }
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.kind.is_numbered() {
            write!(f, "{}:{}", self.kind.name(), self.id)
        } else {
            f.write_str(self.kind.name())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raw_values_match_dlpack() {
        assert_eq!(Device::from_raw(1, 0).unwrap(), Device::CPU);
        assert_eq!(Device::from_raw(2, 3).unwrap(), Device::cuda(3));
        assert_eq!(Device::from_raw(13, 0).unwrap(), Device::CUDA_MANAGED);
        assert_eq!(DeviceKind::Trn as i32, 18);
        assert!(Device::from_raw(5, 0).is_err());
        assert!(Device::from_raw(99, 0).is_err());
        assert!(Device::from_raw(2, -1).is_err());
    }

    #[test]
    fn allocator_indices_name_the_host_or_a_cuda_device() {
        assert_eq!(Device::from_allocator_index(-1).unwrap(), Device::CPU);
        assert_eq!(Device::from_allocator_index(0).unwrap(), Device::cuda(0));
        assert_eq!(Device::from_allocator_index(5).unwrap(), Device::cuda(5));
        for bad in [-2, i32::MIN] {
            let err = Device::from_allocator_index(bad).unwrap_err().to_string();
            assert!(
                err.contains("device") && err.contains(&bad.to_string()),
                "{err}"
            );
        }
    }

    #[test]
    fn names_round_trip() {
        for text in [
            "cpu",
            "cuda:0",
            "cuda:7",
            "cuda_host",
            "cuda_managed",
            "rocm:1",
        ] {
            assert_eq!(Device::parse(text).unwrap().to_string(), text);
        }
        assert_eq!(Device::parse("cuda").unwrap(), Device::cuda(0));
        assert!(Device::parse("cuda_host:2").is_err());
        assert!(Device::parse("gpu")
            .unwrap_err()
            .to_string()
            .contains("gpu"));
        assert!(Device::parse("cuda:x").is_err());
    }

    #[test]
    fn host_accessibility() {
        assert!(Device::CPU.is_host_accessible());
        assert!(Device::CUDA_HOST.is_host_accessible());
        assert!(!Device::cuda(0).is_host_accessible());
    }
}
