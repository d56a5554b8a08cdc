//! nf_tables objects: one file per kernel object, each with its messages
//! and its decoding side by side, as [`crate::expr`] has one file per
//! kernel expression. Attribute numbers are named as in the kernel's uapi
//! header (`include/uapi/linux/netfilter/nf_tables.h`), semantics follow
//! `net/netfilter/nf_tables_api.c`:
//!
//! * [`table`]: `NEWTABLE`, `GETTABLE`, `DELTABLE` (`enum nft_table_attributes`);
//! * [`chain`]: `NEWCHAIN`, `GETCHAIN` (`enum nft_chain_attributes`,
//!   `enum nft_hook_attributes`);
//! * [`set`]: `NEWSET`, `GETSET` (`enum nft_set_attributes`, `enum nft_set_flags`);
//! * [`setelem`]: `NEWSETELEM`, `GETSETELEM`, `DELSETELEM`
//!   (`enum nft_set_elem_list_attributes`, `enum nft_set_elem_attributes`),
//!   and intervals as start and end elements;
//! * [`rule`]: `NEWRULE`, `GETRULE`, `DELRULE` (`enum nft_rule_attributes`);
//! * [`udata`]: libnftnl's userdata TLVs (comments, a set's byte orders),
//!   which the kernel stores without reading them.
//!
//! The decoders read a dump's answer or a message a transaction holds (the
//! fake client applies transactions with them): `*Info` is an object as the
//! kernel lists it, in the kernel's own terms.

pub mod chain;
pub mod rule;
pub mod set;
pub mod setelem;
pub mod table;
pub mod udata;

pub use chain::ChainInfo;
pub use rule::RuleInfo;
pub use set::SetInfo;
pub use setelem::{RawElem, intervals, raw_elems};
