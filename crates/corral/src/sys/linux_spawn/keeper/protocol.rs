//! The keeper's messages: the layout both sides read and write (one
//! fixed-size `SOCK_SEQPACKET` datagram each, descriptors in `SCM_RIGHTS`).

use std::os::raw::c_int;

/// Longest cgroup name carried.
pub(super) const NAME_MAX: usize = 64;
/// A cgroup: its directory, the slot of the directory it is in, its name.
pub(super) const OP_ADD: u8 = 1;
/// Unregisters the slot (when the id matches).
pub(super) const OP_DEL: u8 = 2;
/// A process-group or subreaper root: its pidfd, and its pid in the name
/// bytes (4 bytes).
pub(super) const OP_ADD_ROOT: u8 = 3;
/// A directory cgroups are in (sent once per directory, held until the
/// keeper ends).
pub(super) const OP_PARENT: u8 = 4;
/// Keeper to host, once, when it is ready: how many slots it has.
pub(super) const OP_HELLO: u8 = 5;
/// A tree's cookie (the `CORRAL_TREE` element its processes inherit), in
/// the name bytes, sent before the root is spawned; no descriptor.
pub(super) const OP_COOKIE: u8 = 6;
/// A member of a subreaper tree seen outside the root's group: its pidfd,
/// its pid in the name bytes (4 bytes).
pub(super) const OP_ADD_MEMBER: u8 = 7;
/// op, id (8 bytes), slot (4), parent slot (4), name length, name.
pub(super) const MSG_LEN: usize = 1 + 8 + 4 + 4 + 1 + NAME_MAX;
pub(super) const AT_ID: usize = 1;
pub(super) const AT_SLOT: usize = 9;
pub(super) const AT_PARENT: usize = 13;
pub(super) const AT_NAME_LEN: usize = 17;
pub(super) const AT_NAME: usize = 18;

#[repr(C)]
pub(super) struct Iovec {
    pub(super) base: usize,
    pub(super) len: usize,
}

#[repr(C)]
pub(super) struct Msghdr {
    pub(super) name: usize,
    pub(super) namelen: u32,
    pub(super) iov: *mut Iovec,
    pub(super) iovlen: usize,
    pub(super) control: *mut u8,
    pub(super) controllen: usize,
    pub(super) flags: c_int,
}

pub(super) const AF_UNIX: usize = 1;
pub(super) const SOCK_SEQPACKET: usize = 5;
pub(super) const SOL_SOCKET: c_int = 1;
pub(super) const SCM_RIGHTS: c_int = 1;
pub(super) const MSG_NOSIGNAL: usize = 0x4000;
pub(super) const MSG_DONTWAIT: usize = 0x40;
pub(super) const MSG_CMSG_CLOEXEC: usize = 0x4000_0000;
/// cmsghdr (len, level, type) then one descriptor.
pub(super) const CMSG_HDR: usize = 16;
pub(super) const CMSG_LEN1: usize = CMSG_HDR + 4;
