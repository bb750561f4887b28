//! Device names as users write them (`cpu`, `cuda`: the first GPU) →
//! candle devices, in one place for the server, the trainer and the
//! benchmarks (the config checks the same two names when it loads).
//! A binary built without `--features cuda` answers `cuda` with an error
//! that says how to get it.

use crate::{EngineError, Result};
use candle_core::Device;

/// The names [`by_name`] accepts, for error messages and `--help`.
pub const NAMES: &str = "cpu, cuda";

/// The device `name` names, opened.
pub fn by_name(name: &str) -> Result<Device> {
    match name {
        "cpu" => Ok(Device::Cpu),
        "cuda" => cuda(0),
        _ => Err(EngineError::Device(format!("unknown device `{name}` ({NAMES})"))),
    }
}

#[cfg(feature = "cuda")]
fn cuda(ordinal: usize) -> Result<Device> {
    Device::new_cuda(ordinal).map_err(|e| EngineError::Device(format!("cannot open CUDA device {ordinal}: {e}")))
}

#[cfg(not(feature = "cuda"))]
fn cuda(_ordinal: usize) -> Result<Device> {
    Err(EngineError::Device(
        "this build has no CUDA support: build hone with `--features cuda` (needs the CUDA toolkit)".into(),
    ))
}

/// A short label of `device` for reports: `CPU` or `CUDA:N`.
pub fn label(device: &Device) -> String {
    match device.location() {
        candle_core::DeviceLocation::Cpu => "CPU".into(),
        candle_core::DeviceLocation::Cuda { gpu_id } => format!("CUDA:{gpu_id}"),
        candle_core::DeviceLocation::Metal { gpu_id } => format!("Metal:{gpu_id}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_map_to_devices_and_unknown_ones_are_refused() {
        assert!(by_name("cpu").unwrap().is_cpu());
        assert_eq!(label(&by_name("cpu").unwrap()), "CPU");
        for bad in ["gpu", "cuda:1", "CPU", ""] {
            let e = by_name(bad).unwrap_err().to_string();
            assert!(e.contains("unknown device") && e.contains(NAMES), "{e}");
        }
        if cfg!(not(feature = "cuda")) {
            let e = by_name("cuda").unwrap_err().to_string();
            assert!(e.contains("--features cuda"), "{e}");
        }
    }
}
