//! The two queries whose answers the legacy write commands leave out: the extended write command
//! EX_QUERY_DEVICE (ODP, timestamp and tag-matching capabilities, the 64-bit device flags;
//! docs/kernel-abi.md#extended-queries) and the ioctl method DEVICE/QUERY_PORT (`port_cap_flags2`,
//! `ib_user_ioctl_cmds.h`). `ibv_query_device_ex` and `ibv_query_port` use the same two.

use super::abi::{CommandHeader, QueryDeviceResponse, QueryPortResponse};
use super::ioctl::{rdma_verbs_ioctl, IoctlAttr, IoctlHeader};
use super::pod::{as_bytes, impl_pod};
use super::uverbs::UverbsFile;
use std::io;
use std::os::fd::{AsFd, AsRawFd};

/// `IB_USER_VERBS_CMD_FLAG_EXTENDED`: set in the command number of extended commands.
pub(crate) const EXTENDED_COMMAND_FLAG: u32 = 0x8000_0000;
/// `IB_USER_VERBS_EX_CMD_QUERY_DEVICE`.
pub(crate) const EX_QUERY_DEVICE: u32 = 1;

/// `UVERBS_OBJECT_DEVICE`.
pub(crate) const OBJECT_DEVICE: u16 = 0;
/// `UVERBS_METHOD_QUERY_PORT` (an ioctl method of the device object, Linux 5.0+).
pub(crate) const METHOD_QUERY_PORT: u16 = 2;
/// `UVERBS_ATTR_QUERY_PORT_PORT_NUM`: a constant, passed inline as a u64.
pub(crate) const ATTR_QUERY_PORT_PORT_NUM: u16 = 0;
/// `UVERBS_ATTR_QUERY_PORT_RESP`: the [`QueryPortResponseEx`] to fill.
pub(crate) const ATTR_QUERY_PORT_RESP: u16 = 1;

/// `struct ib_uverbs_ex_cmd_hdr`: follows [`CommandHeader`] in an extended command.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
#[repr(C)]
#[allow(missing_docs)]
pub(crate) struct ExCommandHeader {
    /// User pointer to the response buffer.
    pub response: u64,
    pub provider_in_words: u16,
    pub provider_out_words: u16,
    pub cmd_hdr_reserved: u32,
}

/// `struct ib_uverbs_ex_query_device` (both fields must be 0).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
#[repr(C)]
#[allow(missing_docs)]
pub(crate) struct ExQueryDeviceRequest {
    pub comp_mask: u32,
    pub reserved: u32,
}

/// `struct ib_uverbs_odp_caps` (24 bytes).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
#[repr(C)]
#[allow(missing_docs)]
pub struct OdpCapsDesc {
    pub general_caps: u64,
    pub rc_odp_caps: u32,
    pub uc_odp_caps: u32,
    pub ud_odp_caps: u32,
    pub reserved: u32,
}

/// `struct ib_uverbs_rss_caps` (16 bytes).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
#[repr(C)]
#[allow(missing_docs)]
pub struct RssCapsDesc {
    pub supported_qpts: u32,
    pub max_rwq_indirection_tables: u32,
    pub max_rwq_indirection_table_size: u32,
    pub reserved: u32,
}

/// `struct ib_uverbs_tm_caps` (24 bytes).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
#[repr(C)]
#[allow(missing_docs)]
pub struct TmCapsDesc {
    pub max_rndv_hdr_size: u32,
    pub max_num_tags: u32,
    pub flags: u32,
    pub max_ops: u32,
    pub max_sge: u32,
    pub reserved: u32,
}

/// `struct ib_uverbs_cq_moderation_caps` (8 bytes).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
#[repr(C)]
#[allow(missing_docs)]
pub struct CqModerationCapsDesc {
    pub max_cq_moderation_count: u16,
    pub max_cq_moderation_period: u16,
    pub reserved: u32,
}

/// `struct ib_uverbs_ex_query_device_resp` (304 bytes; older kernels fill fewer, as
/// `response_length` says).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
#[repr(C)]
#[allow(missing_docs)]
pub struct ExQueryDeviceResponse {
    pub base: QueryDeviceResponse,
    pub comp_mask: u32,
    /// How many bytes of this struct the kernel filled.
    pub response_length: u32,
    pub odp_caps: OdpCapsDesc,
    pub timestamp_mask: u64,
    /// kHz.
    pub hca_core_clock: u64,
    pub device_cap_flags_ex: u64,
    pub rss_caps: RssCapsDesc,
    pub max_wq_type_rq: u32,
    pub raw_packet_caps: u32,
    pub tm_caps: TmCapsDesc,
    pub cq_moderation_caps: CqModerationCapsDesc,
    pub max_dm_size: u64,
    pub xrc_odp_caps: u32,
    pub reserved: u32,
}

/// The whole EX_QUERY_DEVICE write (32 bytes): both headers, then the request.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub(crate) struct ExQueryDeviceCommand {
    /// `command` has [`EXTENDED_COMMAND_FLAG`]; the words are 8-byte units without headers.
    pub header: CommandHeader,
    /// The response pointer.
    pub ex_header: ExCommandHeader,
    /// All zero.
    pub request: ExQueryDeviceRequest,
}

impl ExQueryDeviceCommand {
    /// The command, answering into the buffer at `response` (304 bytes).
    pub(crate) fn new(response: u64) -> ExQueryDeviceCommand {
        ExQueryDeviceCommand {
            header: CommandHeader {
                command: EXTENDED_COMMAND_FLAG | EX_QUERY_DEVICE,
                in_words: (size_of::<ExQueryDeviceRequest>() / 8) as u16,
                out_words: (size_of::<ExQueryDeviceResponse>() / 8) as u16,
            },
            ex_header: ExCommandHeader {
                response,
                ..Default::default()
            },
            request: ExQueryDeviceRequest::default(),
        }
    }
}

/// `struct ib_uverbs_query_port_resp_ex` (48 bytes): the legacy answer, then
/// `port_cap_flags2` and (Linux 6.7+) `active_speed_ex`.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
#[repr(C)]
#[allow(missing_docs)]
pub struct QueryPortResponseEx {
    pub legacy: QueryPortResponse,
    pub port_cap_flags2: u16,
    pub reserved: [u8; 2],
    pub active_speed_ex: u32,
}

/// The DEVICE/QUERY_PORT ioctl buffer: the header and its two attributes.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub(crate) struct QueryPortIoctl {
    /// Object DEVICE, method QUERY_PORT, two attributes.
    pub header: IoctlHeader,
    /// The port number, inline.
    pub port_num: IoctlAttr,
    /// Pointer to the [`QueryPortResponseEx`].
    pub response: IoctlAttr,
}

impl QueryPortIoctl {
    /// The ioctl for `port` of a device of kernel driver `driver_id` (`enum
    /// rdma_driver_id`; the kernel refuses any other with EINVAL), answering into the
    /// 48-byte buffer at `response`.
    pub(crate) fn new(driver_id: u32, port: u8, response: u64) -> QueryPortIoctl {
        QueryPortIoctl {
            header: IoctlHeader {
                length: size_of::<QueryPortIoctl>() as u16,
                object_id: OBJECT_DEVICE,
                method_id: METHOD_QUERY_PORT,
                num_attrs: 2,
                driver_id,
                ..Default::default()
            },
            // The kernel declares the port a u8 constant, read as a u64 of 8 inline bytes.
            port_num: IoctlAttr {
                attr_id: ATTR_QUERY_PORT_PORT_NUM,
                len: 8,
                data: port.into(),
                ..Default::default()
            },
            response: IoctlAttr {
                attr_id: ATTR_QUERY_PORT_RESP,
                len: size_of::<QueryPortResponseEx>() as u16,
                data: response,
                ..Default::default()
            },
        }
    }
}

impl_pod!(
    ExCommandHeader,
    ExQueryDeviceRequest,
    OdpCapsDesc,
    RssCapsDesc,
    TmCapsDesc,
    CqModerationCapsDesc,
    ExQueryDeviceResponse,
    ExQueryDeviceCommand,
    QueryPortResponseEx,
    QueryPortIoctl,
);

impl UverbsFile {
    /// EX_QUERY_DEVICE. Kernels without it answer EOPNOTSUPP or ENOSYS (callers then use
    /// QUERY_DEVICE, as libibverbs does).
    pub fn ex_query_device(&self) -> io::Result<ExQueryDeviceResponse> {
        let mut response = ExQueryDeviceResponse::default();
        let command = ExQueryDeviceCommand::new(&mut response as *mut _ as u64);
        // SAFETY: the only memory the kernel writes is the response whose address is in the
        // extended header: `response` on this frame, 304 bytes (out_words * 8), not otherwise
        // accessed until write() returns.
        unsafe { self.write_command("EX_QUERY_DEVICE", as_bytes(&command))? };
        Ok(response)
    }

    /// The ioctl DEVICE/QUERY_PORT on a device of kernel driver `driver_id`. Kernels
    /// before 5.0 answer ENOTTY, and a kernel that knows no such method EPROTONOSUPPORT or
    /// EOPNOTSUPP (callers then use QUERY_PORT).
    pub fn query_port_ex(&self, driver_id: u32, port: u8) -> io::Result<QueryPortResponseEx> {
        let mut response = QueryPortResponseEx::default();
        let mut command = QueryPortIoctl::new(driver_id, port, &mut response as *mut _ as u64);
        // SAFETY: the kernel reads the header and attributes from `command` and writes back
        // into them (the attributes' flags), and writes the response through the pointer
        // in the second attribute: `response`, 48 bytes as that attribute's len says. Both
        // live on this frame and nothing else touches them until the ioctl returns.
        unsafe {
            rdma_verbs_ioctl(
                self.as_fd().as_raw_fd(),
                &mut command as *mut QueryPortIoctl as *mut IoctlHeader,
            )
        }
        .map_err(io::Error::from)?;
        Ok(response)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::pod::assert_layout;

    #[test]
    fn layouts() {
        assert_layout!(ExCommandHeader, size 16, {
            response @ 0, provider_in_words @ 8, provider_out_words @ 10, cmd_hdr_reserved @ 12,
        });
        assert_layout!(ExQueryDeviceRequest, size 8, { comp_mask @ 0, reserved @ 4 });
        assert_layout!(OdpCapsDesc, size 24, {
            general_caps @ 0, rc_odp_caps @ 8, uc_odp_caps @ 12, ud_odp_caps @ 16, reserved @ 20,
        });
        assert_layout!(RssCapsDesc, size 16, {
            supported_qpts @ 0, max_rwq_indirection_tables @ 4,
            max_rwq_indirection_table_size @ 8, reserved @ 12,
        });
        assert_layout!(TmCapsDesc, size 24, {
            max_rndv_hdr_size @ 0, max_num_tags @ 4, flags @ 8, max_ops @ 12, max_sge @ 16,
            reserved @ 20,
        });
        assert_layout!(CqModerationCapsDesc, size 8, {
            max_cq_moderation_count @ 0, max_cq_moderation_period @ 2, reserved @ 4,
        });
        assert_layout!(ExQueryDeviceResponse, size 304, {
            base @ 0, comp_mask @ 176, response_length @ 180, odp_caps @ 184,
            timestamp_mask @ 208, hca_core_clock @ 216, device_cap_flags_ex @ 224,
            rss_caps @ 232, max_wq_type_rq @ 248, raw_packet_caps @ 252, tm_caps @ 256,
            cq_moderation_caps @ 280, max_dm_size @ 288, xrc_odp_caps @ 296, reserved @ 300,
        });
        assert_layout!(ExQueryDeviceCommand, size 32, {
            header @ 0, ex_header @ 8, request @ 24,
        });
        assert_layout!(QueryPortResponseEx, size 48, {
            legacy @ 0, port_cap_flags2 @ 40, reserved @ 42, active_speed_ex @ 44,
        });
        assert_layout!(QueryPortIoctl, size 56, { header @ 0, port_num @ 24, response @ 40 });
    }

    /// docs/kernel-abi.md#extended-queries: command 0x80000001, in_words 1, out_words 38, the
    /// response pointer at byte 8, 32 bytes in all.
    #[test]
    fn ex_query_device_bytes() {
        let c = ExQueryDeviceCommand::new(0x1122_3344_5566_7788);
        let b = as_bytes(&c);
        assert_eq!(b.len(), 32);
        assert_eq!(&b[..8], &[0x01, 0, 0, 0x80, 1, 0, 38, 0]);
        assert_eq!(&b[8..16], &0x1122_3344_5566_7788u64.to_le_bytes());
        assert!(b[16..].iter().all(|&x| x == 0));
    }

    #[test]
    fn query_port_ioctl_bytes() {
        let c = QueryPortIoctl::new(14, 1, 0xdead_beef);
        let b = as_bytes(&c);
        // Header: length 56, object 0, method 2, two attributes, driver id 14 (rxe) at 16.
        assert_eq!(&b[..8], &[56, 0, 0, 0, 2, 0, 2, 0]);
        assert!(b[8..16].iter().all(|&x| x == 0));
        assert_eq!(&b[16..24], &[14, 0, 0, 0, 0, 0, 0, 0]);
        // Attribute 0: id 0, len 8, flags 0, the port inline.
        assert_eq!(&b[24..32], &[0, 0, 8, 0, 0, 0, 0, 0]);
        assert_eq!(&b[32..40], &1u64.to_le_bytes());
        // Attribute 1: id 1, len 48, the pointer.
        assert_eq!(&b[40..48], &[1, 0, 48, 0, 0, 0, 0, 0]);
        assert_eq!(&b[48..56], &0xdead_beefu64.to_le_bytes());
    }
}
