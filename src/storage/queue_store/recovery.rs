//! Opening a store: the scan of every segment with its ack log, torn-tail repair, the
//! recount of `queue_stat`, and the valid messages handed back (docs/storage.md §8).

use super::*;

/// Where the counts of recovery go while segments are scanned.
#[derive(Debug)]
struct Recovery {
    report: RecoveryReport,
    recovered: Vec<RecoveredMessage>,
    /// Valid records returned without their message ([`QueueStore::open_with_budget`]).
    paged: Vec<PagedRecord>,
    /// Body bytes that may still be returned in memory (`u64::MAX`: no budget).
    budget_left: u64,
    /// A body did not fit: every later valid record is returned paged, so the ones in
    /// memory are the oldest.
    budget_spent: bool,
    max_id: Option<u64>,
    dir_changed: bool,
}

impl Recovery {
    fn new(budget_bytes: u64) -> Recovery {
        Recovery {
            report: RecoveryReport::default(),
            recovered: Vec::new(),
            paged: Vec::new(),
            budget_left: budget_bytes,
            budget_spent: false,
            max_id: None,
            dir_changed: false,
        }
    }

    fn saw_id(&mut self, id: Option<u64>) {
        if let Some(id) = id {
            self.max_id = Some(self.max_id.map_or(id, |m| m.max(id)));
        }
    }

    /// Records a repair of damaged data (the broker logs it, naming the queue).
    fn warn(&mut self, line: String) {
        self.report.warnings.push(line);
    }

    /// Records normal housekeeping found at start (the broker logs it as information).
    fn note(&mut self, line: String) {
        self.report.notes.push(line);
    }
}

impl QueueStore {
    /// Opens (creating if missing) the store in `dir`: scans every segment in order with its
    /// ack log, truncates torn tails, skips damaged middle records, recounts a stale or
    /// missing `queue_stat` (without rewriting it: the next seal, compaction or
    /// [`QueueStore::write_stat`] does), deletes fully settled sealed segments, and returns
    /// the valid messages in record-id order with their delivery counts (recovery steps in
    /// `docs/storage.md`).
    /// Leftover `*.compact` and `queue_stat.tmp` files and ack logs without a segment are
    /// removed. Never panics on any disk content.
    ///
    /// # Errors
    /// [`StorageError::Io`] when a file cannot be listed, read, repaired or created;
    /// [`StorageError::Corrupt`] when a segment holds a valid record of an unknown format
    /// version or kind (written by a newer RelayMQ: nothing is repaired then).
    pub fn open(
        backend: Arc<dyn Backend>,
        dir: PathBuf,
        config: StoreConfig,
    ) -> Result<(QueueStore, Vec<RecoveredMessage>, RecoveryReport), StorageError> {
        let (store, recovered, _, report) = Self::open_inner(backend, dir, config, u64::MAX)?;
        Ok((store, recovered, report))
    }

    /// As [`QueueStore::open`], but returns the valid messages whole only while their
    /// bodies fit in `budget_bytes` together, oldest first: from the first one that does
    /// not fit on, each valid record comes back as a [`PagedRecord`] (its place, body size
    /// and delivery count; the body stays on disk and [`QueueStore::read`] fetches it). So a
    /// backlog larger than memory is never loaded at start. Entries are in record-id order.
    ///
    /// # Errors
    /// As [`QueueStore::open`].
    pub fn open_with_budget(
        backend: Arc<dyn Backend>,
        dir: PathBuf,
        config: StoreConfig,
        budget_bytes: u64,
    ) -> Result<(QueueStore, Vec<Recovered>, RecoveryReport), StorageError> {
        let (store, loaded, paged, report) = Self::open_inner(backend, dir, config, budget_bytes)?;
        let mut entries = Vec::with_capacity(loaded.len() + paged.len());
        let mut paged = paged.into_iter().peekable();
        for m in loaded {
            while let Some(p) = paged.next_if(|p| p.record.id < m.record.id) {
                entries.push(Recovered::Paged(p));
            }
            entries.push(Recovered::Loaded(Box::new(m)));
        }
        entries.extend(paged.map(Recovered::Paged));
        Ok((store, entries, report))
    }

    /// Opens the store; valid messages whose bodies exceed `budget_bytes` come back paged.
    #[allow(
        clippy::type_complexity,
        reason = "the store and its recovery report, used once"
    )]
    fn open_inner(
        backend: Arc<dyn Backend>,
        dir: PathBuf,
        config: StoreConfig,
        budget_bytes: u64,
    ) -> Result<
        (
            QueueStore,
            Vec<RecoveredMessage>,
            Vec<PagedRecord>,
            RecoveryReport,
        ),
        StorageError,
    > {
        let dir_io = |e| StorageError::io(&dir, e);
        if !backend.exists(&dir) {
            backend.create_dir_all(&dir).map_err(dir_io)?;
            if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
                backend
                    .sync_dir(parent)
                    .map_err(|e| StorageError::io(parent, e))?;
            }
        }
        let listing = Listing::read(&*backend, &dir).map_err(dir_io)?;
        let mut rec = Recovery::new(budget_bytes);

        let mut leftovers = listing.compact.clone();
        if listing.stat_tmp {
            leftovers.push(tmp_path(Path::new(STAT_FILE_NAME)));
        }
        for name in &leftovers {
            let path = dir.join(name);
            backend
                .remove_file(&path)
                .map_err(|e| StorageError::io(&path, e))?;
            rec.dir_changed = true;
            rec.warn(format!(
                "{}: leftover of an interrupted write, removed",
                path.display()
            ));
        }
        for name in &listing.unknown {
            rec.warn(format!(
                "{}: unknown file in a queue directory, left alone",
                dir.join(name).display()
            ));
        }
        for n in listing.orphan_acks() {
            let path = dir.join(acks_name(n));
            let file = backend
                .open(&path, false)
                .map_err(|e| StorageError::io(&path, e))?;
            let scan =
                ack_log::read_file(&*file, &mut |_| {}).map_err(|e| StorageError::io(&path, e))?;
            rec.saw_id(scan.max_id);
            backend
                .remove_file(&path)
                .map_err(|e| StorageError::io(&path, e))?;
            rec.dir_changed = true;
            rec.warn(format!(
                "{}: ack log without a segment, removed",
                path.display()
            ));
        }

        let mut segments = BTreeMap::new();
        for &n in &listing.data {
            let has_acks = listing.acks.contains(&n);
            let segment = recover_segment(&*backend, &dir, n, has_acks, &mut rec)?;
            segments.insert(n, segment);
        }

        // Sealed segments with nothing valid left go (LavinMQ does the same at start).
        let active = listing.data.last().copied();
        let empty_sealed: Vec<u64> = segments
            .iter()
            .filter(|(&n, s)| Some(n) != active && s.valid == 0)
            .map(|(&n, _)| n)
            .collect();
        for n in empty_sealed {
            for path in [dir.join(data_name(n)), dir.join(acks_name(n))] {
                backend
                    .remove_file(&path)
                    .map_err(|e| StorageError::io(&path, e))?;
            }
            segments.remove(&n);
            rec.dir_changed = true;
            let line = format!(
                "{}: sealed segment fully settled, deleted",
                dir.join(data_name(n)).display()
            );
            rec.note(line);
        }

        // A store that never held a record has no segment yet: segment 1's files are
        // made at its first write (`ensure_active_files`), so declaring a durable queue
        // and recovering an idle one write nothing.
        let active_on_disk = active.is_some();
        let active = active.unwrap_or(FIRST_SEGMENT);
        segments.entry(active).or_default();
        if rec.dir_changed {
            backend.sync_dir(&dir).map_err(dir_io)?;
        }
        // The active segment's files are opened at the first write or read, not now: a
        // queue nobody uses holds no descriptor.
        let files = HandleCache::new(backend.file_budget().cloned());
        let next_id = match rec.max_id {
            None => 1,
            Some(m) => m
                .checked_add(1)
                .ok_or_else(|| StorageError::Failed("record ids exhausted".into()))?,
        };

        let mut store = QueueStore {
            active_on_disk,
            stat_current: false,
            backend: Arc::clone(&backend),
            dir: dir.clone(),
            config,
            segments,
            active,
            files,
            next_id,
            stat_bytes: 0,
            encode_buf: Vec::new(),
            buffering: false,
            pending_data: Vec::new(),
            data_since_round: false,
            pending_acks: BTreeMap::new(),
            failed: None,
        };
        let stat_state = read_stat(&*backend, &dir);
        let actual = store.stat_table();
        match stat_state {
            Ok(Some((table, len))) if table == actual => {
                store.stat_bytes = len;
                store.stat_current = true;
            }
            // Nothing stored, nothing to count: no file is needed until a segment is.
            Ok(None) if actual.is_empty() => store.stat_current = true,
            found => {
                // Recounted from the segments (the scan above), and NOT rewritten here:
                // after a crash every queue that held messages has a stale one, and
                // writing thousands of files (a create, a rename and two fsyncs each) was
                // most of the recovery time. It is a hint only `--check` and
                // the next open read; the next seal, compaction, segment deletion or
                // clean shutdown rewrites it.
                store.stat_bytes = match &found {
                    Ok(Some((_, len))) => *len,
                    _ => file_len(&*backend, &dir.join(STAT_FILE_NAME)),
                };
                rec.report.stat_rebuilt = true;
                let why = match found {
                    Ok(None) => "missing".to_string(),
                    Ok(Some(_)) => "stale".to_string(),
                    Err(e) => e,
                };
                rec.note(format!(
                    "{}: {why}, recounted from the segments (rewritten at the next seal, compaction or clean shutdown)",
                    dir.join(STAT_FILE_NAME).display()
                ));
            }
        }
        let mut recovered = rec.recovered;
        recovered.sort_by_key(|m| m.record.id);
        let mut paged = rec.paged;
        paged.sort_by_key(|p| p.record.id);
        Ok((store, recovered, paged, rec.report))
    }
}

/// Recovers segment `n`: reads its ack log (creating a missing one), scans its records,
/// truncates torn tails, and indexes the records, collecting the valid ones.
fn recover_segment(
    backend: &dyn Backend,
    dir: &Path,
    n: u64,
    has_acks: bool,
    rec: &mut Recovery,
) -> Result<Segment, StorageError> {
    let data_path = dir.join(data_name(n));
    let acks_path = dir.join(acks_name(n));
    let aio = |e| StorageError::io(&acks_path, e);
    let dio = |e| StorageError::io(&data_path, e);

    let acks = backend.open(&acks_path, !has_acks).map_err(aio)?;
    if !has_acks {
        rec.dir_changed = true;
        rec.warn(format!("{}: missing, created empty", acks_path.display()));
    }
    let mut states: HashMap<u64, u32> = HashMap::new();
    let scan = ack_log::read_file(&*acks, &mut |e| {
        let s = states.entry(e.id).or_insert(0);
        match e.kind {
            AckKind::Delivered if *s & COUNT_MASK < COUNT_MASK => *s += 1,
            AckKind::Delivered => {}
            AckKind::Settled => *s |= SETTLED,
        }
    })
    .map_err(aio)?;
    rec.saw_id(scan.max_id);
    if scan.bad_entries > 0 {
        rec.warn(format!(
            "{}: {} damaged entries skipped (first at offset {})",
            acks_path.display(),
            scan.bad_entries,
            scan.first_bad_offset.unwrap_or(0)
        ));
    }
    if scan.tail_bytes() > 0 {
        acks.truncate(scan.valid_len).map_err(aio)?;
        acks.sync().map_err(aio)?;
        rec.report
            .truncated_tails
            .push((acks_path.clone(), scan.tail_bytes()));
        rec.warn(format!(
            "{}: torn tail of {} bytes at offset {} truncated",
            acks_path.display(),
            scan.tail_bytes(),
            scan.valid_len
        ));
    }

    let data = backend.open(&data_path, false).map_err(dio)?;
    let mut segment = Segment::default();
    let recovered = &mut rec.recovered;
    let paged = &mut rec.paged;
    let budget_left = &mut rec.budget_left;
    let budget_spent = &mut rec.budget_spent;
    let fscan = record::scan_file(&*data, &mut |offset, r| {
        let state = states.get(&r.id).copied().unwrap_or(0);
        segment.push(r.id, offset, state);
        if state & SETTLED == 0 {
            let record = RecordRef {
                segment: n,
                id: r.id,
            };
            let body_bytes = r.body.len() as u64;
            if *budget_spent || body_bytes > *budget_left {
                *budget_spent = true;
                paged.push(PagedRecord {
                    record,
                    body_bytes,
                    delivery_count: state & COUNT_MASK,
                    timestamp_ms: r.timestamp_ms,
                    priority: r.properties.priority,
                    expiration_ms: r.properties.expiration_ms().ok().flatten(),
                });
                return;
            }
            *budget_left -= body_bytes;
            recovered.push(RecoveredMessage {
                record,
                timestamp_ms: r.timestamp_ms,
                exchange: r.exchange.to_owned(),
                routing_key: r.routing_key.to_owned(),
                properties: r.properties.clone(),
                body: r.body.to_vec(),
                delivery_count: state & COUNT_MASK,
            });
        }
    })
    .map_err(dio)?;
    if let Some((offset, reason)) = &fscan.unsupported {
        return Err(StorageError::Corrupt {
            path: data_path,
            reason: format!(
                "record at offset {offset}: {reason}; written by a newer RelayMQ? \
                 nothing was repaired"
            ),
        });
    }
    let middle = fscan.middle();
    rec.report.skipped_records += middle.len() as u64;
    for span in middle.iter().take(FINDINGS_LISTED_MAX) {
        rec.warn(format!(
            "{}: damaged bytes {}..{} skipped: {}",
            data_path.display(),
            span.start,
            span.end,
            span.reason
        ));
    }
    segment.data_bytes = fscan.len;
    if let Some(tail) = fscan.tail() {
        data.truncate(tail.start).map_err(dio)?;
        data.sync().map_err(dio)?;
        let dropped = tail.end - tail.start;
        rec.report
            .truncated_tails
            .push((data_path.clone(), dropped));
        rec.warn(format!(
            "{}: torn tail of {dropped} bytes at offset {} truncated ({})",
            data_path.display(),
            tail.start,
            tail.reason
        ));
        segment.data_bytes = tail.start;
    }
    segment.ack_bytes = scan.valid_len;
    rec.saw_id(segment.ids.last().copied());
    Ok(segment)
}

/// Length of the file at `path` in bytes; 0 when it cannot be opened (for the on-disk
/// size of a `queue_stat` left as it was).
fn file_len(backend: &dyn Backend, path: &Path) -> u64 {
    backend.open(path, false).and_then(|f| f.len()).unwrap_or(0)
}

/// Reads and parses `queue_stat`: `Ok(None)` when missing, `Err` saying why it is
/// unusable, else the table and the file's length in bytes.
pub(crate) fn read_stat(
    backend: &dyn Backend,
    dir: &Path,
) -> Result<Option<(StatTable, u64)>, String> {
    let path = dir.join(STAT_FILE_NAME);
    if !backend.exists(&path) {
        return Ok(None);
    }
    let file = backend.open(&path, false).map_err(|e| e.to_string())?;
    let len = file.len().map_err(|e| e.to_string())?;
    if len > STAT_BYTES_MAX {
        return Err(format!("{len} bytes, over the {STAT_BYTES_MAX}-byte limit"));
    }
    let mut buf = vec![0u8; len as usize];
    file.read_at(0, &mut buf).map_err(|e| e.to_string())?;
    stat::parse(&buf).map(|t| Some((t, len)))
}
