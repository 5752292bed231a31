// Artifacts (artifacts.h).
#include "local/artifacts.h"

#include <unistd.h>

#include <algorithm>
#include <map>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "local/internal/fs.h"
#include "local/state_dir.h"

namespace kiln::local::internal {

using ::kiln::PathForMessage;

std::string ArtifactsBaseUri(std::string_view s3_output_path, std::string_view job_name) {
  return absl::StrCat(absl::StripSuffix(Av(s3_output_path), "/"), "/", Av(job_name), "/output");
}

absl::StatusOr<ArtifactsResult> UploadArtifacts(ObjectStores& stores, const ArtifactsPlan& plan) {
  // CompressionType NONE: the model's files as they are, below model/ (the
  // model's URI is that prefix); otherwise model.tar.gz. output.tar.gz is
  // gzip-compressed either way.
  const bool compress_model = plan.compress_model;
  const std::string model_uri =
      absl::StrCat(plan.base_uri, compress_model ? "/model.tar.gz" : "/model/");
  const std::string output_uri = absl::StrCat(plan.base_uri, "/output.tar.gz");
  const std::string& tmp_base = plan.scratch_base;
  // The trees are read below each instance's directory, never through a
  // link the container planted (TreeRoot).
  std::vector<TreeRoot> model_roots, data_roots;
  std::vector<std::shared_ptr<RunLog>> logs;  // each instance's last run's, by root
  for (const ArtifactsSource& inst : plan.instances) {
    logs.push_back(inst.log);
    model_roots.push_back({inst.instance_dir, "ml/model", absl::StrCat(inst.host, ":/opt/ml/model")});
    data_roots.push_back(
        {inst.instance_dir, "ml/output/data", absl::StrCat(inst.host, ":/opt/ml/output/data")});
  }
  // What the archives and the upload cannot take (FIFOs, sockets, device
  // nodes) is named in the instance's log stream rather than dropped
  // without a word.
  std::vector<LeftOut> left_out;
  auto note_left_out = [&](std::string_view what) {
    std::map<size_t, std::vector<std::string>> by_root;
    for (LeftOut& l : left_out) by_root[l.root].push_back(std::move(l.display));
    left_out.clear();
    for (auto& [root, names] : by_root) {
      if (root >= logs.size()) continue;
      const size_t shown = std::min<size_t>(names.size(), 10);
      NoteForRun(logs[root],
                 absl::StrCat(Av(what), " leaves out what is not a file, directory or link: ",
                              PathForMessage(absl::StrJoin(names.begin(),
                                                           names.begin() + shown, ", ")),
                              names.size() > shown
                                  ? absl::StrCat(" and ", names.size() - shown, " more")
                                  : ""));
    }
  };
  auto upload_tar = [&](const std::vector<TreeRoot>& roots, const std::string& uri,
                        const std::string& what) -> absl::Status {
    const std::string tmp = absl::StrCat(tmp_base, "-", what);
    absl::Status s = MakeDirs(DirName(tmp));
    // Locked while it exists: a provider made meanwhile on this state
    // directory leaves it alone (StaleFiles).
    absl::StatusOr<UniqueFd> fd = UniqueFd();
    if (s.ok()) fd = MakeLockedScratch(tmp, /*dir=*/false);
    if (!fd.ok()) s = fd.status();
    if (s.ok()) s = WriteTar(roots, fd->get(), tmp, /*gzip=*/true, &left_out);
    note_left_out(absl::StrCat("the ", what, " archive"));
    if (s.ok()) {
      absl::StatusOr<ObjectStore*> store = stores.For(uri);
      s = store.ok() ? (*store)->PutFromFile(uri, tmp) : store.status();
    }
    if (fd.ok()) unlink(tmp.c_str());  // (then the lock goes)
    if (!s.ok()) {
      return absl::Status(s.code(), absl::StrCat(PathForMessage(uri), ": ", s.message()));
    }
    return s;
  };
  auto upload_files = [&](const std::vector<TreeRoot>& roots,
                          const std::string& prefix) -> absl::Status {
    absl::StatusOr<ObjectStore*> store = stores.For(prefix);
    if (!store.ok()) {
      return absl::Status(store.status().code(),
                          absl::StrCat(PathForMessage(prefix), ": ", store.status().message()));
    }
    // Each file goes from the descriptor it was opened as (its /proc
    // name), never from a path a container could have changed since.
    absl::Status s = ForEachMergedFile(
        roots,
        [&](const std::string& rel, int fd, int64_t) -> absl::Status {
          const std::string uri = absl::StrCat(prefix, rel);
          absl::Status put = (*store)->PutFromFile(uri, absl::StrCat("/proc/self/fd/", fd));
          if (!put.ok()) {
            return absl::Status(put.code(),
                                absl::StrCat(PathForMessage(uri), ": ", put.message()));
          }
          return put;
        },
        &left_out);
    note_left_out("the model upload");
    return s;
  };
  absl::Status s = compress_model ? upload_tar(model_roots, model_uri, "model")
                                  : upload_files(model_roots, model_uri);
  if (s.ok()) s = upload_tar(data_roots, output_uri, "output");
  if (!s.ok()) return s;
  return ArtifactsResult{model_uri};
}

}  // namespace kiln::local::internal
