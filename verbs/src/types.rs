//! Newtypes and enumerations shared by every verbs object.
#![forbid(unsafe_code)]

use std::fmt;
use std::net::Ipv6Addr;

macro_rules! newtype {
    ($(#[$m:meta])* $name:ident($inner:ty)) => {
        $(#[$m])*
        #[derive(Copy, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
        pub struct $name(pub $inner);

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!(stringify!($name), "({:#x})"), self.0)
            }
        }
        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{:#x}", self.0)
            }
        }
    };
}

newtype!(
    /// A queue pair number (24 bits on the wire).
    QpNumber(u32)
);
newtype!(
    /// A packet sequence number (24 bits on the wire).
    Psn(u32)
);
newtype!(
    /// The local key of a memory region, used in scatter/gather entries.
    LocalKey(u32)
);
newtype!(
    /// The remote key (STag on iWARP) a peer uses to reach a memory region.
    RemoteKey(u32)
);
newtype!(
    /// An InfiniBand local identifier (always 0 on RoCE and iWARP).
    Lid(u16)
);

impl Psn {
    /// The PSN masked to its 24 wire bits.
    pub fn masked(self) -> Psn {
        Psn(self.0 & 0x00ff_ffff)
    }
}

impl QpNumber {
    /// The QPN masked to its 24 wire bits.
    pub fn masked(self) -> QpNumber {
        QpNumber(self.0 & 0x00ff_ffff)
    }
}

/// A 128-bit global identifier (an IPv6 address on RoCE v2), in network byte order.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Default)]
pub struct Gid(pub [u8; 16]);

impl Gid {
    /// Whether every byte is zero (an empty GID table slot).
    pub fn is_zero(&self) -> bool {
        self.0 == [0; 16]
    }
    /// The subnet prefix (first 8 bytes) as a big-endian integer.
    pub fn subnet_prefix(&self) -> u64 {
        u64::from_be_bytes(self.0[..8].try_into().expect("8 bytes"))
    }
    /// The interface id (last 8 bytes) as a big-endian integer.
    pub fn interface_id(&self) -> u64 {
        u64::from_be_bytes(self.0[8..].try_into().expect("8 bytes"))
    }
    /// rdma-core's wire text form used by `ibv_rc_pingpong`: 32 hex digits, 4 groups of 8,
    /// each group a big-endian u32 of the GID's bytes, i.e. the bytes in order.
    pub fn to_pingpong_wire(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }
    /// Parses the 32-hex-digit form written by [`Gid::to_pingpong_wire`].
    pub fn from_pingpong_wire(text: &str) -> Option<Gid> {
        if text.len() != 32 || !text.is_ascii() {
            return None;
        }
        let mut raw = [0u8; 16];
        for i in 0..4 {
            let v = u32::from_str_radix(&text[i * 8..i * 8 + 8], 16).ok()?;
            raw[i * 4..i * 4 + 4].copy_from_slice(&v.to_be_bytes());
        }
        Some(Gid(raw))
    }
}

impl From<Ipv6Addr> for Gid {
    fn from(a: Ipv6Addr) -> Gid {
        Gid(a.octets())
    }
}

impl From<Gid> for Ipv6Addr {
    fn from(g: Gid) -> Ipv6Addr {
        Ipv6Addr::from(g.0)
    }
}

impl fmt::Display for Gid {
    /// The form `ibv_devinfo -v` and `ibv_rc_pingpong` print: `fe80::5054:ff:fe12:3456`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", Ipv6Addr::from(self.0))
    }
}

impl fmt::Debug for Gid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Gid({self})")
    }
}

/// Queue pair states (`enum ib_qp_state`).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum QpState {
    /// Freshly created; no work requests accepted.
    Reset = 0,
    /// Receives may be posted; nothing is processed yet.
    Init = 1,
    /// Ready to receive.
    ReadyToReceive = 2,
    /// Ready to send: fully connected.
    ReadyToSend = 3,
    /// Send queue drained.
    SendQueueDrain = 4,
    /// Send queue error.
    SendQueueError = 5,
    /// Error: every outstanding work request is flushed.
    Error = 6,
}

impl QpState {
    /// Decodes the kernel's state number.
    pub fn from_raw(v: u32) -> Option<QpState> {
        Some(match v {
            0 => QpState::Reset,
            1 => QpState::Init,
            2 => QpState::ReadyToReceive,
            3 => QpState::ReadyToSend,
            4 => QpState::SendQueueDrain,
            5 => QpState::SendQueueError,
            6 => QpState::Error,
            _ => return None,
        })
    }
    /// rdma-core's short name (`RESET`, `INIT`, `RTR`, `RTS`, `SQD`, `SQE`, `ERR`).
    pub fn name(self) -> &'static str {
        match self {
            QpState::Reset => "RESET",
            QpState::Init => "INIT",
            QpState::ReadyToReceive => "RTR",
            QpState::ReadyToSend => "RTS",
            QpState::SendQueueDrain => "SQD",
            QpState::SendQueueError => "SQE",
            QpState::Error => "ERR",
        }
    }
}

/// Path MTU (`enum ib_mtu`).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum Mtu {
    /// 256 bytes.
    Mtu256 = 1,
    /// 512 bytes.
    Mtu512 = 2,
    /// 1024 bytes.
    Mtu1024 = 3,
    /// 2048 bytes.
    Mtu2048 = 4,
    /// 4096 bytes.
    Mtu4096 = 5,
}

impl Mtu {
    /// Decodes the kernel's enum value.
    pub fn from_raw(v: u32) -> Option<Mtu> {
        Some(match v {
            1 => Mtu::Mtu256,
            2 => Mtu::Mtu512,
            3 => Mtu::Mtu1024,
            4 => Mtu::Mtu2048,
            5 => Mtu::Mtu4096,
            _ => return None,
        })
    }
    /// From a byte count (256, 512, 1024, 2048, 4096), as `ibv_rc_pingpong -m` takes it.
    pub fn from_bytes(n: u32) -> Option<Mtu> {
        Some(match n {
            256 => Mtu::Mtu256,
            512 => Mtu::Mtu512,
            1024 => Mtu::Mtu1024,
            2048 => Mtu::Mtu2048,
            4096 => Mtu::Mtu4096,
            _ => return None,
        })
    }
    /// The size in bytes.
    pub fn bytes(self) -> u32 {
        128 << (self as u32)
    }
}

/// Logical port state (`enum ib_port_state`).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum PortState {
    /// No state change.
    Nop,
    /// Link down.
    Down,
    /// Initializing.
    Init,
    /// Armed.
    Armed,
    /// Active: traffic flows.
    Active,
    /// Active, deferred.
    ActiveDefer,
    /// A value this library does not know.
    Unknown(u32),
}

impl PortState {
    /// Decodes the kernel's state number.
    pub fn from_raw(v: u32) -> PortState {
        match v {
            0 => PortState::Nop,
            1 => PortState::Down,
            2 => PortState::Init,
            3 => PortState::Armed,
            4 => PortState::Active,
            5 => PortState::ActiveDefer,
            o => PortState::Unknown(o),
        }
    }
    /// The text `ibv_devinfo` prints (`PORT_ACTIVE`, `PORT_DOWN`, ...).
    pub fn name(self) -> &'static str {
        match self {
            PortState::Nop => "PORT_NOP",
            PortState::Down => "PORT_DOWN",
            PortState::Init => "PORT_INIT",
            PortState::Armed => "PORT_ARMED",
            PortState::Active => "PORT_ACTIVE",
            PortState::ActiveDefer => "PORT_ACTIVE_DEFER",
            PortState::Unknown(_) => "invalid state",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mtu_round_trip() {
        for n in [256, 512, 1024, 2048, 4096] {
            assert_eq!(Mtu::from_bytes(n).unwrap().bytes(), n);
        }
        assert!(Mtu::from_bytes(1000).is_none());
    }

    #[test]
    fn pingpong_gid_round_trip() {
        let g = Gid("fe80::5054:ff:fe12:3456"
            .parse::<Ipv6Addr>()
            .unwrap()
            .octets());
        let w = g.to_pingpong_wire();
        assert_eq!(w, "fe80000000000000505400fffe123456");
        assert_eq!(Gid::from_pingpong_wire(&w), Some(g));
        assert_eq!(Gid::from_pingpong_wire("zz"), None);
    }
}
