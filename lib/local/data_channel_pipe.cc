// Pipe mode: FIFOs fed epoch after epoch by a writer thread per instance
// (local_data_channel.h, internal/pipe_stream.h).
#include "local/local_data_channel.h"

namespace kiln::local::channel {

std::string FifoPath(const std::string& root, const std::string& channel, uint64_t epoch) {
  return absl::StrCat(root, "/", channel, "_", epoch);
}

absl::Status MakeFifo(const std::string& path) {
  if (mkfifo(path.c_str(), 0644) == 0) return absl::OkStatus();
  if (errno == EEXIST) {
    unlink(path.c_str());
    if (mkfifo(path.c_str(), 0644) == 0) return absl::OkStatus();
  }
  return internal::ErrnoStatus(errno, "mkfifo", path);
}

absl::Status LocalDataChannel::StartPipes(const v1::Channel& channel, std::shared_ptr<PipeSpec> spec,
                                          std::shared_ptr<StopSignal> stop) {
  absl::StatusOr<std::vector<Source>> sources = ListSources(channel);
  if (!sources.ok()) return sources.status();
  spec->sources = *std::move(sources);
  for (const std::string& root : spec->data_roots) {
    if (!internal::IsDirectory(root)) {
      return absl::AbortedError(absl::StrCat("channel '", Shown(spec->channel),
                                             "': instance directory ", PathForMessage(root),
                                             " is gone (released?)"));
    }
    absl::Status s = MakeFifo(FifoPath(root, spec->channel, 0));
    if (!s.ok()) return InChannel(spec->channel, s);
  }
  if (stop->stopped()) {
    return absl::CancelledError(absl::StrCat("channel '", Shown(spec->channel), "': job ended"));
  }
  std::shared_ptr<const PipeSpec> shared = std::move(spec);
  for (size_t i = 0; i < shared->data_roots.size(); ++i) {
    tasks_.Run([this, shared, i, stop] { RunPipe(shared, i, stop); });
  }
  return absl::OkStatus();
}

void LocalDataChannel::ReportFailure(const PipeSpec& spec, absl::Status status) {
  loop_.Post([this, alive = std::weak_ptr<Alive>(alive_), job = spec.job_name,
              attempt = spec.attempt, status = std::move(status)]() mutable {
    if (alive.lock() && listener_ != nullptr) listener_->OnChannelFailed(job, attempt, status);
  });
}

absl::StatusOr<FifoWriter::Result> LocalDataChannel::StreamObject(FifoWriter& writer,
                                                                  const PipeSpec& spec,
                                                                  const std::string& uri) {
  if (!spec.gzip && !spec.recordio) {
    absl::StatusOr<ObjectStore*> store = stores_.For(uri);
    if (!store.ok()) return store.status();
    absl::StatusOr<std::string> local = (*store)->LocalPath(uri);
    if (!local.ok() && !absl::IsUnimplemented(local.status())) return local.status();
    const std::string path = local.value_or("");
    if (!path.empty()) {
      // file://: the page cache's pages straight into the pipe.
      // O_NONBLOCK: a FIFO put in the object's place must not block the
      // open (and the job's end with it); it is refused below. O_NOFOLLOW:
      // the store resolved the path; a link put in its place meanwhile is
      // not followed.
      int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOFOLLOW);
      // (The path is a manifest's or a listing's: shown escaped, which
      // ErrnoStatus does itself.)
      if (fd < 0) return internal::ErrnoStatus(errno, "open", path);
      struct stat st;
      absl::StatusOr<FifoWriter::Result> r;
      if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        r = absl::NotFoundError(absl::StrCat("'", PathForMessage(path), "' is not a regular file"));
      } else {
        r = writer.SpliceFrom(fd, path);
      }
      close(fd);
      return r;
    }
  }
  absl::StatusOr<ObjectStore*> store = stores_.For(uri);
  if (!store.ok()) return store.status();
  FifoWriter::Result stopped_with = FifoWriter::Result::kOk;
  absl::Status write_error;
  std::string record;
  // Where decompressed bytes go: the record being built, or the FIFO.
  auto emit = [&](std::string_view data) -> absl::Status {
    if (spec.recordio) {
      if (record.size() + data.size() >= (size_t{1} << 29)) {
        return absl::InvalidArgumentError(
            "a RecordIO record holds less than 2^29 bytes; this object has more");
      }
      record.append(data.data(), data.size());
      return absl::OkStatus();
    }
    absl::StatusOr<FifoWriter::Result> r = writer.Write(data);
    if (!r.ok()) {
      write_error = r.status();
      return absl::CancelledError("write");
    }
    if (*r != FifoWriter::Result::kOk) {
      stopped_with = *r;
      return absl::CancelledError("write");
    }
    return absl::OkStatus();
  };
  internal::Inflater inflater;
  absl::Status s = (*store)->Read(uri, [&](std::string_view chunk) -> absl::Status {
    return spec.gzip ? inflater.Feed(chunk, emit) : emit(chunk);
  });
  if (!write_error.ok()) return write_error;
  if (stopped_with != FifoWriter::Result::kOk) return stopped_with;
  if (!s.ok()) return s;
  if (spec.gzip) {
    s = inflater.Finish();
    if (!s.ok()) return s;
  }
  if (spec.recordio) {
    std::string framed;
    s = internal::AppendRecordIO(record, &framed);
    if (!s.ok()) return s;
    record.clear();
    return writer.Write(framed);
  }
  return FifoWriter::Result::kOk;
}

absl::StatusOr<FifoWriter::Result> LocalDataChannel::StreamLine(FifoWriter& writer,
                                                                const PipeSpec& spec,
                                                                const Source& line) {
  using R = FifoWriter::Result;
  std::string framed;
  for (const ManifestPart& part : line.parts) {
    absl::StatusOr<R> r;
    if (part.ref) {
      r = StreamObject(writer, spec, part.value);
      if (!r.ok()) {
        const absl::Status& e = r.status();
        return absl::Status(e.code(), absl::StrCat("attribute '", Shown(part.attribute),
                                                   "': object '", PathForMessage(part.value), "'",
                                                   absl::IsNotFound(e) ? " does not exist" : "",
                                                   ": ", e.message()));
      }
    } else if (spec.recordio) {
      framed.clear();
      absl::Status s = internal::AppendRecordIO(part.value, &framed);
      if (!s.ok()) {
        return absl::Status(s.code(),
                            absl::StrCat("attribute '", Shown(part.attribute), "': ",
                                         s.message()));
      }
      r = writer.Write(framed);
    } else {
      r = writer.Write(part.value);
    }
    if (!r.ok() || *r != R::kOk) return r;
  }
  return R::kOk;
}

void LocalDataChannel::RunPipe(std::shared_ptr<const PipeSpec> spec, size_t instance,
                               std::shared_ptr<StopSignal> stop) {
  const PipeSpec& s = *spec;
  const std::string& root = s.data_roots[instance];
  struct stat root_st;
  if (stat(root.c_str(), &root_st) != 0) return;
  // Whether `root` is still the directory this delivery made its FIFOs in (a
  // reset tree is a new directory: a late writer must not touch it).
  auto same_root = [&] {
    struct stat now;
    return stat(root.c_str(), &now) == 0 && now.st_ino == root_st.st_ino &&
           now.st_dev == root_st.st_dev;
  };
  // (Best effort: a FIFO left is an ended epoch's, or a stopped or failed
  // stream's, in the instance's tree, which the next run makes fresh.)
  auto remove_fifo = [&](const std::string& path) {
    if (same_root()) unlink(path.c_str());
  };
  FifoWriter writer(*stop);
  using R = FifoWriter::Result;
  for (uint64_t epoch = 0;; ++epoch) {
    const std::string fifo = FifoPath(root, s.channel, epoch);
    absl::StatusOr<R> r = writer.Open(fifo);
    if (!r.ok()) {
      ReportFailure(s, InChannel(s.channel, r.status()));
      remove_fifo(fifo);
      return;
    }
    if (*r != R::kOk) {  // stopped, or the tree is gone
      remove_fifo(fifo);
      return;
    }
    bool read_to_end = true;
    for (size_t j : internal::EpochOrder(s.sources.size(), s.has_seed, s.seed, epoch, s.sharded,
                                         s.shards.positions[instance], s.shards.count)) {
      const Source& source = s.sources[j];
      r = source.line > 0 ? StreamLine(writer, s, source) : StreamObject(writer, s, source.uri);
      if (!r.ok()) {
        const absl::Status& e = r.status();
        ReportFailure(
            s,
            absl::Status(e.code(),
                         source.line > 0
                             ? absl::StrCat("channel '", Shown(s.channel), "': augmented manifest ",
                                            PathForMessage(source.uri), " line ", source.line,
                                            " (epoch ", epoch, "): ", e.message())
                             : absl::StrCat("channel '", Shown(s.channel), "': object '",
                                            PathForMessage(source.uri), "'",
                                            !absl::IsNotFound(e) ? ""
                                            : source.size >= 0   ? " disappeared during the stream"
                                                                 : " named by the manifest",
                                            " (epoch ", epoch, "): ", e.message())));
        writer.Close();
        remove_fifo(fifo);
        return;
      }
      if (*r == R::kStopped) {
        writer.Close();
        remove_fifo(fifo);
        return;
      }
      if (*r == R::kReaderClosed) {
        read_to_end = false;
        break;
      }
    }
    if (read_to_end) {
      r = writer.WaitDrained();
      if (!r.ok() || *r == R::kStopped) {
        writer.Close();
        remove_fifo(fifo);
        return;
      }
    }
    // The reader has it all (or closed early): the next epoch's FIFO first,
    // so a reader at end of file finds it, then end of file on this one.
    if (stop->stopped() || !same_root()) {
      writer.Close();
      remove_fifo(fifo);
      return;
    }
    absl::Status made = MakeFifo(FifoPath(root, s.channel, epoch + 1));
    writer.Close();
    remove_fifo(fifo);
    if (!made.ok()) {
      if (same_root() && !stop->stopped()) {
        ReportFailure(s, InChannel(s.channel, made));
      }
      return;
    }
  }
}

}  // namespace kiln::local::channel
