//! The Redis module file the limiter image carries, and `screenlimit-limiter copy-module`: the
//! operator's init container copies it into a Redis pod's emptyDir, where `redis-server` loads
//! it. The image has no shell and no `cp`, so the limiter binary does the copy.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use crate::store::redis::access::LIMITER_MODULE_ACL_RULES;

/// Where the limiter image keeps the module (`scripts/build-images.sh`, `docker/limiter.Dockerfile`).
pub const IMAGE_MODULE_PATH: &str = "/usr/lib/screenlimit/screenlimit_redis_module.so";
/// The module's file name in the directory it is copied to.
pub const MODULE_FILE_NAME: &str = "screenlimit_redis_module.so";
/// Beside it, the ACL rules that grant the limiter this module's commands
/// ([`LIMITER_MODULE_ACL_RULES`]): written from the same image as the module, so a Redis pod
/// grants exactly the commands the module it loads has (Redis refuses to start on a rule naming
/// a command it lacks). A pod whose image wrote no such file (one older than `SL.RENEW`) grants
/// the operator's `LIMITER_MODULE_ACL`, the commands every module release has.
pub const MODULE_ACL_FILE_NAME: &str = "screenlimit_redis_module.acl";

/// Why the copy failed, naming the file at fault.
#[derive(Debug, thiserror::Error)]
pub enum CopyModuleError {
    #[error(
        "cannot read the module at {path}: {source} (the limiter image carries it at {IMAGE_MODULE_PATH}; elsewhere pass --from)"
    )]
    Source { path: PathBuf, source: io::Error },
    #[error("{path} is not a shared object (no ELF header): pass the module's .so with --from")]
    NotElf { path: PathBuf },
    #[error(
        "cannot write the module into {path}: {source} (the directory must exist and be writable)"
    )]
    Destination { path: PathBuf, source: io::Error },
}

/// Copies the module `from` into `dir` as [`MODULE_FILE_NAME`], readable and executable by every
/// user (Redis runs as another uid, and refuses a module file without execute permission), through a temporary file renamed into place so that a reader never
/// sees half a file; then its ACL rules beside it ([`MODULE_ACL_FILE_NAME`]). Returns the
/// module's path.
pub fn copy_module(from: &Path, dir: &Path) -> Result<PathBuf, CopyModuleError> {
    let bytes = fs::read(from).map_err(|source| CopyModuleError::Source {
        path: from.to_owned(),
        source,
    })?;
    if !bytes.starts_with(b"\x7fELF") {
        return Err(CopyModuleError::NotElf {
            path: from.to_owned(),
        });
    }
    let target = dir.join(MODULE_FILE_NAME);
    let partial = dir.join(format!(".{MODULE_FILE_NAME}.partial"));
    let destination = |source| CopyModuleError::Destination {
        path: dir.to_owned(),
        source,
    };
    fs::write(&partial, &bytes).map_err(destination)?;
    set_loadable(&partial).map_err(destination)?;
    fs::rename(&partial, &target).map_err(destination)?;
    let rules = dir.join(format!(".{MODULE_ACL_FILE_NAME}.partial"));
    fs::write(&rules, format!("{LIMITER_MODULE_ACL_RULES}\n")).map_err(destination)?;
    fs::rename(&rules, dir.join(MODULE_ACL_FILE_NAME)).map_err(destination)?;
    Ok(target)
}

#[cfg(unix)]
fn set_loadable(path: &Path) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(path, fs::Permissions::from_mode(0o755))
}

#[cfg(not(unix))]
fn set_loadable(_: &Path) -> io::Result<()> {
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shared_object_is_copied_whole_readable_and_executable() {
        let dir = tempfile::tempdir().unwrap();
        let from = dir.path().join("in.so");
        let module = [b"\x7fELF".as_slice(), &[7u8; 4096]].concat();
        fs::write(&from, &module).unwrap();
        let out = tempfile::tempdir().unwrap();
        let written = copy_module(&from, out.path()).unwrap();
        assert_eq!(written, out.path().join(MODULE_FILE_NAME));
        assert_eq!(fs::read(&written).unwrap(), module);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = fs::metadata(&written).unwrap().permissions().mode() & 0o777;
            assert_eq!(
                mode, 0o755,
                "redis-server refuses a module it cannot execute"
            );
        }
        let rules = fs::read_to_string(out.path().join(MODULE_ACL_FILE_NAME)).unwrap();
        assert_eq!(
            rules.trim(),
            LIMITER_MODULE_ACL_RULES,
            "the grant of its commands beside it"
        );
        let leftovers: Vec<_> = fs::read_dir(out.path()).unwrap().collect();
        assert_eq!(leftovers.len(), 2, "no partial file left behind");
    }

    #[test]
    fn a_missing_source_or_destination_or_a_non_elf_file_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("nope.so");
        let err = copy_module(&missing, dir.path()).unwrap_err().to_string();
        assert!(err.contains("nope.so") && err.contains("--from"), "{err}");

        let text = dir.path().join("module.txt");
        fs::write(&text, "not a module").unwrap();
        let err = copy_module(&text, dir.path()).unwrap_err().to_string();
        assert!(err.contains("module.txt") && err.contains("ELF"), "{err}");

        let elf = dir.path().join("ok.so");
        fs::write(&elf, b"\x7fELF....").unwrap();
        let err = copy_module(&elf, &dir.path().join("no-such-dir"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("no-such-dir"), "{err}");
    }
}
