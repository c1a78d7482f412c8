//! Plain-old-data: the kernel's `#[repr(C)]` structs as bytes and back.

/// Plain old data: a `#[repr(C)]` kernel struct made only of integers and integer arrays (or
/// of such structs, or a union of such types), with every padding byte spelled out as a
/// `reserved` field, so that every bit pattern (all zeroes in particular) is a valid value and
/// its bytes may be viewed as `[u8]`. The one such trait of the workspace: the verbs, rdma_cm
/// and provider ABI structs all implement it.
///
/// # Safety
/// Implement only for such types (the layout tests of each struct check that the declared
/// fields cover its whole size). A union must also keep every byte of every value initialised:
/// its members are private and each constructor starts from [`Pod::zeroed`].
pub unsafe trait Pod: Copy + 'static {
    /// The all-zero value.
    fn zeroed() -> Self {
        // SAFETY: by the trait's contract every bit pattern, all zeroes included, is valid.
        unsafe { std::mem::zeroed() }
    }

    /// The bytes of the value.
    fn as_bytes(&self) -> &[u8] {
        as_bytes(self)
    }
}

/// The bytes of `value`.
pub fn as_bytes<T: Pod>(value: &T) -> &[u8] {
    // SAFETY: T is Pod (no padding, no pointers with validity requirements), so all of its
    // size_of::<T>() bytes are initialized and may be read as u8 for the borrow's lifetime.
    unsafe { std::slice::from_raw_parts((value as *const T).cast::<u8>(), size_of::<T>()) }
}

/// A value read from the first `size_of::<T>()` bytes of `bytes`; missing bytes read as zero
/// (older kernels write shorter responses).
pub fn from_bytes<T: Pod>(bytes: &[u8]) -> T {
    let mut value = T::zeroed();
    let n = bytes.len().min(size_of::<T>());
    // SAFETY: `value` is a live, exclusively borrowed T of size_of::<T>() bytes; we write at
    // most that many bytes into it from a distinct buffer, and every bit pattern is a valid T
    // because T is Pod.
    unsafe {
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), (&mut value as *mut T).cast::<u8>(), n)
    };
    value
}

/// Implements [`Pod`] for structs whose layout tests prove they have no hidden padding.
macro_rules! impl_pod {
    ($($t:ty),* $(,)?) => {
        $(
            // SAFETY: repr(C), integer fields only, padding spelled out; see the layout tests.
            unsafe impl $crate::sys::pod::Pod for $t {}
        )*
    };
}
pub(crate) use impl_pod;

// SAFETY: plain integers: every bit pattern is valid and there is no padding.
unsafe impl Pod for u32 {}
// SAFETY: as above.
unsafe impl Pod for u64 {}

/// Asserts a struct's size and the offset of every field.
#[cfg(test)]
macro_rules! assert_layout {
    ($t:ty, size $size:expr, { $($field:ident @ $off:expr),* $(,)? }) => {{
        assert_eq!(std::mem::size_of::<$t>(), $size, "size of {}", stringify!($t));
        $(
            assert_eq!(
                std::mem::offset_of!($t, $field),
                $off,
                "offset of {}.{}",
                stringify!($t),
                stringify!($field)
            );
        )*
    }};
}
#[cfg(test)]
pub(crate) use assert_layout;

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Copy, Clone, Default, Debug, PartialEq)]
    #[repr(C)]
    struct Two {
        a: u32,
        b: u32,
    }
    impl_pod!(Two);

    #[test]
    fn round_trip_and_short_input() {
        let v = Two {
            a: 1,
            b: 0x0203_0405,
        };
        let bytes = as_bytes(&v);
        assert_eq!(bytes, &[1, 0, 0, 0, 5, 4, 3, 2]);
        assert_eq!(from_bytes::<Two>(bytes), v);
        assert_eq!(from_bytes::<Two>(&bytes[..4]), Two { a: 1, b: 0 });
    }
}
