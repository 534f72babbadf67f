// Package backup copies a store checkpoint to object storage and brings it
// back: the backups of ARCHITECTURE.md section 7 and of the seed ADR
// section 9 (under wal.type: dual a backup plus the intake log since its
// manifest's intake_offset is the recovery point).
//
// # Layout of a backup location
//
// Every key lives under the configured prefix P (keys use "/"; an empty
// prefix puts them at the root of the location). The layout must not change
// without a bump of ManifestVersion:
//
//	P/LATEST                           the id of the newest complete backup (written last)
//	P/backups/<id>/manifest.json       the signed manifest envelope of backup <id>
//	P/backups/<id>/files/<name>        a checkpoint file that is not a table file
//	P/shared/<sha256>                  a table file (*.sst, *.blob), content-addressed,
//	                                   uploaded once and shared by every backup naming it
//
// <id> is a ULID, so ids sort by creation time. manifest.json is
//
//	{"signature":"hmac-sha256:<hex>","manifest":{...Manifest...}}
//
// where the signature is HMAC-SHA256, keyed with the configured signing key,
// over manifestDomain followed by the exact bytes of the "manifest" value as
// stored. Readers verify those bytes before decoding them, so no JSON
// canonicalisation is involved.
//
// # Write order (the rules Backuper.Run keeps)
//
//  1. Every file a manifest names is stored before the manifest.
//  2. The manifest is stored before LATEST names it, and LATEST is written
//     last: a reader that follows LATEST always finds a complete backup, and
//     a run that fails anywhere leaves the previous LATEST in place.
//  3. Retention runs only after LATEST moved, never deletes the backup LATEST
//     names, deletes a backup's manifest before its files (a backup is either
//     whole or absent), and deletes a shared file only when no remaining
//     manifest names it.
//  4. The secondary location gets the same backup (same id, same manifest
//     bytes) only after the primary's LATEST moved.
//
// Stores are the small interface this package consumes (Store); OpenBucket
// wires the two schemes explicitly: file:// through a crash-safe local store
// written here (temp file, fsync, rename, fsync the directory), and s3://
// through gocloud.dev/blob's s3blob driver. gocloud's own fileblob driver is
// not used for file://: it renames without fsync, so a power cut could leave
// a LATEST that names a manifest which never reached the disk.
package backup
