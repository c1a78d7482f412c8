//! Loading libibverbs and the errors of the bridge, on a host without RDMA devices. Needs
//! rdma-core's libibverbs1 installed (CI installs it): a missing library fails these tests.

use rdmasock_ibverbs::__private::{load, LoadError};
use rdmasock_ibverbs::{BridgeContext, IbverbsProvider, Selection};
use rdmasock_verbs::{DeviceInfo, NodeType, Transport};
use std::path::PathBuf;

fn fake_device(name: &str, driver: &str) -> DeviceInfo {
    DeviceInfo {
        name: name.into(),
        node_guid: 0x0123_4567_89ab_cdef,
        node_type: NodeType::Ca,
        transport: Transport::InfiniBand,
        driver: Some(driver.into()),
        driver_id: None,
        uverbs_path: Some(PathBuf::from("/dev/infiniband/uverbs-none")),
        uverbs_sysfs: None,
        uverbs_abi: None,
        sysfs: None,
        parent_netdev: None,
        fw_ver: String::new(),
        ports: Vec::new(),
    }
}

#[test]
fn the_system_libibverbs_loads_with_every_symbol() {
    assert!(
        IbverbsProvider::available(),
        "libibverbs.so.1 did not load: {:?} (install libibverbs1)",
        rdmasock_ibverbs::__private::library().err()
    );
    let lib = rdmasock_ibverbs::__private::library().unwrap();
    assert!(lib.path.contains("libibverbs"), "{}", lib.path);
}

#[test]
fn a_missing_library_says_what_to_install() {
    // SAFETY: the path does not exist: nothing is loaded.
    let err = unsafe { load("/nonexistent/libibverbs.so.1") }.unwrap_err();
    assert!(matches!(err, LoadError::Missing { .. }), "{err:?}");
    let text = err.to_string();
    assert!(text.contains("/nonexistent/libibverbs.so.1"), "{text}");
    assert!(
        text.contains("apt install libibverbs1 ibverbs-providers"),
        "{text}"
    );
}

#[test]
fn a_library_without_the_versioned_symbols_is_too_old() {
    // SAFETY: libc is already loaded (its initialisers ran); the bridge binds none of its
    // symbols, as it lacks libibverbs' versioned ones.
    let err = unsafe { load("libc.so.6") }.unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, LoadError::TooOld { .. }), "{err:?}");
    assert!(text.contains("ibv_get_device_list@IBVERBS_1.1"), "{text}");
    assert!(text.contains("too old"), "{text}");
}

#[test]
fn a_device_libibverbs_does_not_list_names_its_driver_and_the_package() {
    let device = fake_device("mlx5_97", "mlx5");
    let err = BridgeContext::open(&device, Selection::Fallback).unwrap_err();
    let text = err.to_string();
    assert!(text.contains("does not list `mlx5_97`"), "{text}");
    assert!(text.contains("driver `mlx5`"), "{text}");
    assert!(text.contains("ibverbs-providers"), "{text}");
    assert!(text.contains("no pure-Rust rdmasock provider"), "{text}");
    let err = BridgeContext::open(&device, Selection::Forced).unwrap_err();
    assert!(err.to_string().contains("RDMASOCK_PROVIDER"), "{err}");
}
