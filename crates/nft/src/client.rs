//! The seam in front of the kernel: [`NftClient`], what the verbs ask of
//! nf_tables (apply a transaction, read a table back), implemented by the
//! netlink client [`Nft`] and, for tests without root, by
//! `crate::fake::Fake` (feature `fake`).
//!
//! Callers take `&mut impl NftClient` (or `C: NftClient + ?Sized`): one
//! monomorphized call per transaction, no dynamic dispatch per message.

use super::dump::Listing;
use super::{Nft, NftError, Transaction, encode};

/// An nf_tables client bound to one network namespace.
pub trait NftClient {
    /// Applies `tx` as one transaction, all or nothing.
    ///
    /// Errors: [`NftError::Refused`] naming the first refused object and
    /// the errno (nothing applied); [`NftError::Sock`].
    fn commit(&mut self, tx: Transaction) -> Result<(), NftError>;

    /// Reads table `inet NAME` back: `Ok(None)` when it does not exist.
    fn read(&mut self, table: &str) -> Result<Option<Listing>, NftError>;

    /// Whether table `inet NAME` exists (no transaction).
    fn table_exists(&mut self, table: &str) -> Result<bool, NftError>;

    /// Removes table `inet NAME`. Returns false when there was none (then
    /// nothing is committed, so nothing is freed and no RCU wait follows).
    fn delete_table(&mut self, name: &str) -> Result<bool, NftError> {
        if !self.table_exists(name)? {
            return Ok(false);
        }
        match self.commit(encode::delete_table(name)) {
            Ok(()) => Ok(true),
            // Removed by someone else in between: the outcome is the same.
            Err(e) if e.errno() == Some(libc::ENOENT) => Ok(false),
            Err(e) => Err(e),
        }
    }
}

impl NftClient for Nft {
    fn commit(&mut self, tx: Transaction) -> Result<(), NftError> {
        Nft::commit(self, tx)
    }

    fn read(&mut self, table: &str) -> Result<Option<Listing>, NftError> {
        Nft::read(self, table)
    }

    fn table_exists(&mut self, table: &str) -> Result<bool, NftError> {
        Nft::table_exists(self, table)
    }
}

impl<T: NftClient + ?Sized> NftClient for &mut T {
    fn commit(&mut self, tx: Transaction) -> Result<(), NftError> {
        (**self).commit(tx)
    }

    fn read(&mut self, table: &str) -> Result<Option<Listing>, NftError> {
        (**self).read(table)
    }

    fn table_exists(&mut self, table: &str) -> Result<bool, NftError> {
        (**self).table_exists(table)
    }
}
