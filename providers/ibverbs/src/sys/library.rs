//! Loading `libibverbs.so.1` with `dlopen` and binding its versioned symbols with `dlvsym`.
//!
//! Nothing links to libibverbs at build time: the library is opened once per process, the
//! first time the bridge is used, and never closed (providers rdma-core loads from it stay
//! mapped for the life of the process, as in any C program).

use super::abi::*;
use std::ffi::{c_char, c_int, c_uint, c_void, CStr, CString};
use std::sync::OnceLock;

/// The soname we load (`RDMASOCK_LIBIBVERBS` overrides it with a path or another name).
pub(crate) const LIBRARY_NAME: &str = "libibverbs.so.1";

/// The environment variable that names another libibverbs to load.
pub(crate) const LIBRARY_ENV: &str = "RDMASOCK_LIBIBVERBS";

/// Why libibverbs could not be used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LoadError {
    /// `dlopen` failed: the library (or one it needs) is not installed.
    Missing {
        /// What was asked for.
        library: String,
        /// `dlerror()`.
        reason: String,
    },
    /// The library lacks a symbol at the version this crate binds.
    TooOld {
        /// The library's path.
        library: String,
        /// `name@VERSION`.
        symbol: String,
    },
}

impl std::fmt::Display for LoadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LoadError::Missing { library, reason } => write!(
                f,
                "cannot load {library} ({reason}): install rdma-core's libibverbs \
                 (Debian/Ubuntu: `apt install libibverbs1 ibverbs-providers`; \
                 Fedora/RHEL: `dnf install libibverbs`)"
            ),
            LoadError::TooOld { library, symbol } => write!(
                f,
                "{library} lacks {symbol}: it is too old or not rdma-core's libibverbs; \
                 install rdma-core's libibverbs1 (rdma-core v17 or newer)"
            ),
        }
    }
}

/// Declares [`Library`] (one field per function) and the binding of every field by
/// `dlvsym(name, version)`.
macro_rules! functions {
    ($( $field:ident = $symbol:literal @ $version:literal :
        fn($($arg:ty),*) $(-> $ret:ty)? ;)*) => {
        /// The functions of libibverbs the bridge calls (the data path goes through the
        /// context's ops table instead, as verbs.h's inline functions do).
        #[allow(missing_docs)]
        pub struct Library {
            /// The file it was loaded from.
            pub path: String,
            $(pub $field: unsafe extern "C" fn($($arg),*) $(-> $ret)?,)*
        }

        fn bind_all(
            path: String,
            sym: impl Fn(&str, &str) -> Result<*mut c_void, LoadError>,
        ) -> Result<Library, LoadError> {
            Ok(Library {
                $($field: {
                    let p = sym($symbol, $version)?;
                    // SAFETY: the symbol is rdma-core's exported function of this name and
                    // version, whose C prototype (verbs.h) is the field's type; data and
                    // function pointers have the same size on every platform Linux runs on.
                    unsafe {
                        std::mem::transmute::<*mut c_void, unsafe extern "C" fn($($arg),*) $(-> $ret)?>(p)
                    }
                },)*
                path,
            })
        }
    };
}

functions! {
    get_device_list = "ibv_get_device_list" @ "IBVERBS_1.1": fn(*mut c_int) -> *mut *mut IbvDevice;
    free_device_list = "ibv_free_device_list" @ "IBVERBS_1.1": fn(*mut *mut IbvDevice);
    get_device_name = "ibv_get_device_name" @ "IBVERBS_1.1": fn(*mut IbvDevice) -> *const c_char;
    get_device_guid = "ibv_get_device_guid" @ "IBVERBS_1.1": fn(*mut IbvDevice) -> u64;
    open_device = "ibv_open_device" @ "IBVERBS_1.1": fn(*mut IbvDevice) -> *mut IbvContext;
    close_device = "ibv_close_device" @ "IBVERBS_1.1": fn(*mut IbvContext) -> c_int;
    query_device = "ibv_query_device" @ "IBVERBS_1.1": fn(*mut IbvContext, *mut IbvDeviceAttr) -> c_int;
    query_port = "ibv_query_port" @ "IBVERBS_1.1": fn(*mut IbvContext, u8, *mut IbvPortAttr) -> c_int;
    query_gid = "ibv_query_gid" @ "IBVERBS_1.1": fn(*mut IbvContext, u8, c_int, *mut IbvGid) -> c_int;
    alloc_pd = "ibv_alloc_pd" @ "IBVERBS_1.1": fn(*mut IbvContext) -> *mut IbvPd;
    dealloc_pd = "ibv_dealloc_pd" @ "IBVERBS_1.1": fn(*mut IbvPd) -> c_int;
    reg_mr = "ibv_reg_mr" @ "IBVERBS_1.1": fn(*mut IbvPd, *mut c_void, usize, c_int) -> *mut IbvMr;
    dereg_mr = "ibv_dereg_mr" @ "IBVERBS_1.1": fn(*mut IbvMr) -> c_int;
    create_comp_channel = "ibv_create_comp_channel" @ "IBVERBS_1.0": fn(*mut IbvContext) -> *mut IbvCompChannel;
    destroy_comp_channel = "ibv_destroy_comp_channel" @ "IBVERBS_1.0": fn(*mut IbvCompChannel) -> c_int;
    create_cq = "ibv_create_cq" @ "IBVERBS_1.1": fn(*mut IbvContext, c_int, *mut c_void, *mut IbvCompChannel, c_int) -> *mut IbvCq;
    destroy_cq = "ibv_destroy_cq" @ "IBVERBS_1.1": fn(*mut IbvCq) -> c_int;
    get_cq_event = "ibv_get_cq_event" @ "IBVERBS_1.1": fn(*mut IbvCompChannel, *mut *mut IbvCq, *mut *mut c_void) -> c_int;
    ack_cq_events = "ibv_ack_cq_events" @ "IBVERBS_1.1": fn(*mut IbvCq, c_uint);
    create_qp = "ibv_create_qp" @ "IBVERBS_1.1": fn(*mut IbvPd, *mut IbvQpInitAttr) -> *mut IbvQp;
    modify_qp = "ibv_modify_qp" @ "IBVERBS_1.1": fn(*mut IbvQp, *mut IbvQpAttr, c_int) -> c_int;
    query_qp = "ibv_query_qp" @ "IBVERBS_1.1": fn(*mut IbvQp, *mut IbvQpAttr, c_int, *mut IbvQpInitAttr) -> c_int;
    destroy_qp = "ibv_destroy_qp" @ "IBVERBS_1.1": fn(*mut IbvQp) -> c_int;
    get_async_event = "ibv_get_async_event" @ "IBVERBS_1.1": fn(*mut IbvContext, *mut IbvAsyncEvent) -> c_int;
    ack_async_event = "ibv_ack_async_event" @ "IBVERBS_1.1": fn(*mut IbvAsyncEvent);
}

impl std::fmt::Debug for Library {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Library").field("path", &self.path).finish()
    }
}

/// The process's libibverbs, loaded on first use.
pub fn library() -> Result<&'static Library, LoadError> {
    static LIBRARY: OnceLock<Result<Library, LoadError>> = OnceLock::new();
    LIBRARY
        .get_or_init(|| {
            // Ignored in a process with elevated privileges: the caller may not choose the
            // code it runs.
            let name = rdmasock_verbs::environment::path_variable(LIBRARY_ENV)
                .and_then(|v| v.into_string().ok())
                .unwrap_or_else(|| LIBRARY_NAME.to_string());
            // SAFETY: the name is rdma-core's soname, or the path the process's environment
            // names in its place (configuration the program trusts, like LD_LIBRARY_PATH;
            // never taken from the environment of a process with elevated privileges).
            unsafe { load(&name) }
        })
        .as_ref()
        .map_err(Clone::clone)
}

fn dlerror_text() -> String {
    // SAFETY: dlerror returns NULL or a NUL-terminated string owned by libc, valid until the
    // next dl* call on this thread; it is copied at once.
    unsafe {
        let e = libc::dlerror();
        if e.is_null() {
            "unknown dlopen error".into()
        } else {
            CStr::from_ptr(e).to_string_lossy().into_owned()
        }
    }
}

/// Opens `name` and binds every symbol, or says which one is missing.
///
/// # Safety
/// `name` must be rdma-core's libibverbs (or a library whose exported versioned symbols have
/// the prototypes of `<infiniband/verbs.h>`): the functions are bound by name and version
/// only, and loading runs the library's initialisers.
pub unsafe fn load(name: &str) -> Result<Library, LoadError> {
    let missing = |reason: String| LoadError::Missing {
        library: name.to_string(),
        reason,
    };
    let cname = CString::new(name).map_err(|_| missing("the name contains a NUL byte".into()))?;
    // SAFETY: a valid C string; RTLD_NOW resolves everything now so a broken install fails
    // here, RTLD_LOCAL keeps libibverbs' symbols out of the global namespace. Running the
    // library's constructors is what loading it means.
    let handle = unsafe { libc::dlopen(cname.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    if handle.is_null() {
        return Err(missing(dlerror_text()));
    }
    let path = library_path(handle).unwrap_or_else(|| name.to_string());
    let sym = |symbol: &str, version: &str| -> Result<*mut c_void, LoadError> {
        let too_old = || LoadError::TooOld {
            library: path.clone(),
            symbol: format!("{symbol}@{version}"),
        };
        let s = CString::new(symbol).map_err(|_| too_old())?;
        let v = CString::new(version).map_err(|_| too_old())?;
        // SAFETY: handle is a live dlopen handle; both strings are NUL-terminated.
        let p = unsafe { libc::dlvsym(handle, s.as_ptr(), v.as_ptr()) };
        if p.is_null() {
            Err(too_old())
        } else {
            Ok(p)
        }
    };
    bind_all(path.clone(), sym)
}

/// The file the handle was loaded from (for messages).
fn library_path(handle: *mut c_void) -> Option<String> {
    let name = CString::new("ibv_get_device_list").ok()?;
    // SAFETY: handle is a live dlopen handle and name is NUL-terminated.
    let sym = unsafe { libc::dlsym(handle, name.as_ptr()) };
    if sym.is_null() {
        return None;
    }
    // SAFETY: Dl_info is plain data; zeroed is a valid value for it.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: sym is an address inside a loaded object; dladdr fills `info` and returns 0 on
    // failure. dli_fname, when non-null, points at the object's name, valid while it stays
    // loaded (forever: it is never closed); it is copied at once.
    unsafe {
        if libc::dladdr(sym, &mut info) == 0 || info.dli_fname.is_null() {
            return None;
        }
        Some(
            CStr::from_ptr(info.dli_fname)
                .to_string_lossy()
                .into_owned(),
        )
    }
}
