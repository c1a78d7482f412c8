//! Async events a device reports ([`AsyncEvent`]): what providers return and
//! [`Context::read_async_event`](crate::Context::read_async_event) hands out.
#![forbid(unsafe_code)]

/// The kind of an async event (`enum ib_event_type`).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
#[allow(missing_docs)]
pub enum AsyncEventKind {
    CqError,
    QpFatal,
    QpRequestError,
    QpAccessError,
    CommunicationEstablished,
    SendQueueDrained,
    PathMigrated,
    PathMigrationError,
    DeviceFatal,
    PortActive,
    PortError,
    LidChange,
    PkeyChange,
    SmChange,
    SrqError,
    SrqLimitReached,
    QpLastWqeReached,
    ClientReregister,
    GidChange,
    WqFatal,
    Unknown(u32),
}

impl AsyncEventKind {
    /// Decodes the kernel's event number.
    pub fn from_raw(v: u32) -> AsyncEventKind {
        use AsyncEventKind::*;
        const ALL: [AsyncEventKind; 20] = [
            CqError,
            QpFatal,
            QpRequestError,
            QpAccessError,
            CommunicationEstablished,
            SendQueueDrained,
            PathMigrated,
            PathMigrationError,
            DeviceFatal,
            PortActive,
            PortError,
            LidChange,
            PkeyChange,
            SmChange,
            SrqError,
            SrqLimitReached,
            QpLastWqeReached,
            ClientReregister,
            GidChange,
            WqFatal,
        ];
        ALL.get(v as usize).copied().unwrap_or(Unknown(v))
    }

    /// The text rdma-core's `ibv_event_type_str` gives for this event ("unknown" for an
    /// event number it does not know).
    pub fn text(self) -> &'static str {
        use AsyncEventKind::*;
        match self {
            CqError => "CQ error",
            QpFatal => "local work queue catastrophic error",
            QpRequestError => "invalid request local work queue error",
            QpAccessError => "local access violation work queue error",
            CommunicationEstablished => "communication established",
            SendQueueDrained => "send queue drained",
            PathMigrated => "path migrated",
            PathMigrationError => "path migration request error",
            DeviceFatal => "local catastrophic error",
            PortActive => "port active",
            PortError => "port error",
            LidChange => "LID change",
            PkeyChange => "P_Key change",
            SmChange => "SM change",
            SrqError => "SRQ catastrophic error",
            SrqLimitReached => "SRQ limit reached",
            QpLastWqeReached => "last WQE reached",
            ClientReregister => "client reregistration",
            GidChange => "GID table change",
            WqFatal => "WQ fatal",
            Unknown(_) => "unknown",
        }
    }
}

/// One async event.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct AsyncEvent {
    /// What happened.
    pub kind: AsyncEventKind,
    /// The CQ or QP cookie it is about, or the port number.
    pub element: u64,
}
