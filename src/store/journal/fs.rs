//! The file operations the journal makes, behind one boundary: the disk in production, a
//! simulated disk that loses what was not synced in the tests (`sim`), so that the append,
//! recovery and checkpoint protocols run against crashes between any two operations.

use std::io;
use std::path::{Path, PathBuf};

/// A file the journal writes (a segment, the spare, the checkpoint marker).
pub trait FsFile: Send {
    fn write_all_at(&self, buf: &[u8], off: u64) -> io::Result<()>;
    /// `fdatasync`: the data and the size.
    fn sync_data(&self) -> io::Result<()>;
    /// `fsync`.
    fn sync_all(&self) -> io::Result<()>;
    fn set_len(&self, len: u64) -> io::Result<()>;
    fn len(&self) -> io::Result<u64>;
}

/// A directory tree: names change at once and become durable when their directory is synced.
pub trait Fs: Send + Sync {
    /// Creates `dir` and its missing parents, each synced with the directory holding its name.
    fn create_dir_durable(&self, dir: &Path) -> io::Result<()>;
    /// The paths of a directory's entries.
    fn list(&self, dir: &Path) -> io::Result<Vec<PathBuf>>;
    fn read(&self, path: &Path) -> io::Result<Vec<u8>>;
    /// Creates (or truncates) a file for writing.
    fn create(&self, path: &Path) -> io::Result<Box<dyn FsFile>>;
    /// Opens an existing file for writing.
    fn open(&self, path: &Path) -> io::Result<Box<dyn FsFile>>;
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    fn remove(&self, path: &Path) -> io::Result<()>;
    /// Makes a directory's entries durable.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
    fn available_space(&self, dir: &Path) -> io::Result<u64>;
}

/// The real disk.
pub struct Disk;

impl FsFile for std::fs::File {
    fn write_all_at(&self, buf: &[u8], off: u64) -> io::Result<()> {
        std::os::unix::fs::FileExt::write_all_at(self, buf, off)
    }
    fn sync_data(&self) -> io::Result<()> {
        std::fs::File::sync_data(self)
    }
    fn sync_all(&self) -> io::Result<()> {
        std::fs::File::sync_all(self)
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        std::fs::File::set_len(self, len)
    }
    fn len(&self) -> io::Result<u64> {
        self.metadata().map(|m| m.len())
    }
}

impl Fs for Disk {
    fn create_dir_durable(&self, dir: &Path) -> io::Result<()> {
        crate::store::create_dir_durable(dir)
    }
    fn list(&self, dir: &Path) -> io::Result<Vec<PathBuf>> {
        std::fs::read_dir(dir)?.map(|e| e.map(|e| e.path())).collect()
    }
    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        std::fs::read(path)
    }
    fn create(&self, path: &Path) -> io::Result<Box<dyn FsFile>> {
        let f = std::fs::OpenOptions::new().create(true).write(true).truncate(true).open(path)?;
        Ok(Box::new(f))
    }
    fn open(&self, path: &Path) -> io::Result<Box<dyn FsFile>> {
        Ok(Box::new(std::fs::OpenOptions::new().write(true).open(path)?))
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        std::fs::rename(from, to)
    }
    fn remove(&self, path: &Path) -> io::Result<()> {
        std::fs::remove_file(path)
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        crate::store::sync_path(dir)
    }
    fn available_space(&self, dir: &Path) -> io::Result<u64> {
        fs2::available_space(dir)
    }
}
