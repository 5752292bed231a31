// The bwrap runtime (container_runtime.h): bubblewrap, started with an empty
// environment, as the container user in a user namespace of its own, with
// no_new_privs and a seccomp filter; a read-only host root, the instance's
// tmp/ at /tmp, the state directory hidden, the instance tree at /opt/ml,
// the program directory read-only at /opt/program, its own PID, IPC and UTS
// namespaces (docs/local-backend.md, docs/security.md).
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "kiln/plugin/json_value.h"
#include "local/container_runtime.h"
#include "local/internal/fs.h"
#include "local/internal/seccomp_filter.h"

namespace kiln::local::internal {

std::vector<std::string> BwrapIdentityArgs(const std::optional<Credentials>& run_as) {
  // In a user namespace of its own, root inside with no power over the host
  // and no nested namespace, unless the sandbox is started by root itself
  // (LocalOptions::container_user root), which keeps root but drops every
  // capability.
  if (run_as.has_value() || geteuid() != 0) {
    return {"--unshare-user", "--disable-userns", "--uid", "0", "--gid", "0"};
  }
  return {"--cap-drop", "ALL"};
}

namespace {

// bubblewrap's own process gets an empty environment, and its options, among
// them the container's variables as --setenv pairs and the seccomp filter's
// descriptor (5), come from a memory file (descriptor 4); only the command
// stays on its command line (bubblewrap reads no command from that file).
// Nothing of the job reaches bubblewrap itself, neither a variable its loader
// would honour (LD_PRELOAD) nor a secret in its /proc/<pid>/cmdline. `fds`
// gets the descriptors to hand over, after the info pipe's (3).
absl::Status PrepareBwrapCommand(const RunSpec& spec, const std::string* seccomp,
                                 std::vector<std::string>& argv, std::vector<std::string>& env,
                                 std::vector<UniqueFd>& fds) {
  auto command = std::find(argv.begin() + 1, argv.end(), "--");
  std::vector<std::string> options(argv.begin() + 1, command);
  for (const auto& [k, v] : spec.config.env) options.insert(options.end(), {"--setenv", k, v});
  if (seccomp != nullptr) options.insert(options.end(), {"--seccomp", "5"});
  std::string text;
  for (const std::string& a : options) {
    if (a.find('\0') != std::string::npos) {
      return absl::InvalidArgumentError("a container variable holds a NUL byte");
    }
    text.append(a);
    text.push_back('\0');
  }
  absl::StatusOr<UniqueFd> args = MemoryFile("kiln-bwrap-args", text);
  if (!args.ok()) return args.status();
  fds.push_back(*std::move(args));
  if (seccomp != nullptr) {
    absl::StatusOr<UniqueFd> filter = MemoryFile("kiln-seccomp", *seccomp);
    if (!filter.ok()) return filter.status();
    fds.push_back(*std::move(filter));
  }
  std::vector<std::string> short_argv = {argv[0], "--args", "4"};
  short_argv.insert(short_argv.end(), command, argv.end());
  argv = std::move(short_argv);
  env.clear();
  return absl::OkStatus();
}

// Reads bubblewrap's --info-fd report (one JSON object) until it parses or
// the pipe closes; returns the sandbox's init (child-pid), or -1 when
// bubblewrap reported none (it could not set the sandbox up).
pid_t ReadSandboxPid(int info_fd) {
  char buf[4096];
  std::string info_text;
  absl::StatusOr<::kiln::JsonValue> doc = absl::NotFoundError("no sandbox information");
  while (true) {
    ssize_t n = read(info_fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    info_text.append(buf, static_cast<size_t>(n));
    doc = ::kiln::ParseJsonValue(info_text);
    if (doc.ok()) break;
  }
  const ::kiln::JsonValue* child = doc.ok() ? doc->Find("child-pid") : nullptr;
  absl::StatusOr<int64_t> child_pid =
      child != nullptr ? child->AsInt64() : absl::StatusOr<int64_t>(absl::NotFoundError(""));
  return child_pid.ok() ? static_cast<pid_t>(*child_pid) : -1;
}

class BwrapRuntime final : public ContainerRuntime {
 public:
  BwrapRuntime(std::string program, std::optional<Credentials> run_as,
               std::shared_ptr<const std::string> seccomp)
      : program_(std::move(program)), run_as_(run_as), seccomp_(std::move(seccomp)) {}

  bool MountsTree() const override { return true; }

  // Any clean absolute path: a directory of the instance is mounted there.
  absl::Status CheckCheckpointPath(const std::string&) const override {
    return absl::OkStatus();
  }

  void FillPaths(const CommandInput&, const std::string& home,
                 ContainerConfigInput& config) const override {
    config.base_dir = kContainerBase;
    config.program_dir = kContainerProgram;
    config.tmp_dir = "/tmp";
    config.home = home;
  }

  void BuildCommand(const CommandInput& in, RunSpec& spec) const override {
    std::vector<std::string>& a = spec.argv;
    // /tmp is the instance's scratch directory on disk (emptied between
    // runs, like the rest of the tree), not memory.
    a = {program_};
    const std::vector<std::string> identity = BwrapIdentityArgs(run_as_);
    a.insert(a.end(), identity.begin(), identity.end());
    a.insert(a.end(), {"--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--bind",
                       in.paths.tmp_dir, "/tmp"});
    // Hide Kiln's own files (other instances, logs, caches); what is below
    // the host's /tmp is hidden already.
    for (const std::string& hide : {in.state_dir, in.log_dir}) {
      if (!absl::StartsWith(hide, "/tmp/") &&
          (hide == in.state_dir || !absl::StartsWith(hide, in.state_dir + "/"))) {
        a.insert(a.end(), {"--tmpfs", hide});
      }
    }
    a.insert(a.end(), {"--tmpfs", "/opt", "--bind", in.paths.ml_dir, kContainerBase, "--ro-bind",
                       in.program_dir, kContainerProgram});
    if (!in.hosts_file.empty()) a.insert(a.end(), {"--ro-bind", in.hosts_file, "/etc/hosts"});
    if (!in.checkpoint_path.empty()) {
      a.insert(a.end(), {"--bind", in.checkpoint_host, in.checkpoint_path});
    }
    a.insert(a.end(), {"--unshare-pid", "--unshare-ipc", "--unshare-uts"});
    if (in.netns_fd >= 0) {
      spec.netns_fd = in.netns_fd;
    } else if (in.isolated) {
      a.push_back("--unshare-net");
    }
    // Spawn's setsid already leaves bwrap, and so the sandbox, without a
    // controlling terminal to inject input into: bwrap need not call it again.
    a.insert(a.end(), {"--hostname", in.host, "--die-with-parent", "--info-fd", "3", "--chdir",
                       kContainerBase, "--"});
    a.insert(a.end(), in.command.begin(), in.command.end());
    spec.cwd = in.paths.ml_dir;
  }

  // Each view (a link input/data/<channel> -> the source folder) becomes,
  // inside the sandbox, a read-only bind mount of that folder at
  // /opt/ml/input/data/<channel> (the link is replaced by the empty directory
  // the mount needs): reads go to the source, writes fail with EROFS, and the
  // folder is visible even where the sandbox hides the host's path (/tmp).
  absl::Status AttachViews(RunSpec& spec, const std::vector<std::string>& views) const override {
    std::vector<std::string> binds;
    for (const std::string& path : views) {
      char target[PATH_MAX];
      ssize_t n = readlink(path.c_str(), target, sizeof(target) - 1);
      if (n <= 0) return ErrnoStatus(errno, "readlink", path);
      target[n] = '\0';
      if (unlink(path.c_str()) != 0) return ErrnoStatus(errno, "unlink", path);
      absl::Status s = MakeDirs(path);
      if (!s.ok()) return s;
      binds.insert(binds.end(),
                   {"--ro-bind", target, Rebase(path, spec.paths.ml_dir, kContainerBase)});
    }
    if (binds.empty()) return absl::OkStatus();
    // After the tree's own bind (mounts apply in order).
    auto at = std::find(spec.argv.begin(), spec.argv.end(), "--unshare-pid");
    spec.argv.insert(at, binds.begin(), binds.end());
    return absl::OkStatus();
  }

  absl::StatusOr<Started> Start(RunSpec& spec, UniqueFd output, ContainerProc& proc,
                                absl::FunctionRef<void(std::string_view)>) const override {
    int info[2] = {-1, -1};
    if (pipe2(info, O_CLOEXEC) != 0) return ErrnoStatus(errno, "pipe", "bwrap info");
    UniqueFd info_read(info[0]);
    UniqueFd info_write(info[1]);
    SpawnSpec ss = SpawnSpecFor(spec, output.get());
    // bwrap ends its sandbox with this process (--die-with-parent and a PID
    // namespace): no keeper.
    ss.keeper = false;
    ss.fds.push_back(info_write.get());
    std::vector<UniqueFd> bwrap_fds;
    absl::Status prepared = PrepareBwrapCommand(spec, seccomp_.get(), ss.argv, ss.env, bwrap_fds);
    for (const UniqueFd& fd : bwrap_fds) ss.fds.push_back(fd.get());
    absl::StatusOr<pid_t> spawned = prepared.ok() ? Spawn(ss) : absl::StatusOr<pid_t>(prepared);
    bwrap_fds.clear();
    output.reset();
    info_write.reset();
    if (!spawned.ok()) return spawned.status();
    {
      absl::MutexLock lock(&proc.mu);
      proc.pid = *spawned;
    }
    // Wait until the sandbox is set up (it reports its init's pid).
    Started started{*spawned, /*up=*/false};
    const pid_t sandbox = ReadSandboxPid(info_read.get());
    info_read.reset();
    if (sandbox > 0) {
      const int sandbox_fd = PidfdOpen(sandbox);
      const std::string ns = PidNamespaceOf(sandbox);
      absl::MutexLock lock(&proc.mu);
      proc.sandbox_pid = sandbox;
      proc.sandbox_pidfd = sandbox_fd;
      proc.sandbox_ns = ns;
      started.up = sandbox_fd >= 0 && !ns.empty();
    }
    return started;
  }

 private:
  const std::string program_;
  const std::optional<Credentials> run_as_;
  // The seccomp filter (BPF) handed to every sandbox.
  const std::shared_ptr<const std::string> seccomp_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<ContainerRuntime>> NewBwrapRuntime(
    const std::string& bwrap_path, std::optional<Credentials> run_as) {
  const char* path = std::getenv("PATH");
  absl::StatusOr<std::string> found =
      FindProgram(bwrap_path, path != nullptr ? path : kDefaultHostPath);
  if (!found.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("the bwrap runtime needs bubblewrap: ", found.status().message()));
  }
  absl::StatusOr<std::string> filter = ContainerSeccompFilter();
  if (!filter.ok()) return absl::FailedPreconditionError(filter.status().message());
  // It must actually work here (user namespaces, mounts), as the container
  // user.
  SpawnSpec probe;
  probe.argv = {*found};
  const std::vector<std::string> identity = BwrapIdentityArgs(run_as);
  probe.argv.insert(probe.argv.end(), identity.begin(), identity.end());
  probe.argv.insert(probe.argv.end(), {"--ro-bind", "/", "/", "true"});
  probe.run_as = run_as;
  int null_fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
  probe.output_fd = null_fd;
  absl::StatusOr<pid_t> pid = Spawn(probe);
  close(null_fd);
  int wstatus = 0;
  if (pid.ok()) {
    while (waitpid(*pid, &wstatus, 0) < 0 && errno == EINTR) {
    }
  }
  if (!pid.ok() || !WIFEXITED(wstatus) || WEXITSTATUS(wstatus) != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the bwrap runtime needs a working bubblewrap: '", absl::StrJoin(probe.argv, " "),
        "' failed", run_as.has_value() ? absl::StrCat(" as user ", run_as->uid) : "",
        pid.ok() ? "" : absl::StrCat(": ", pid.status().message())));
  }
  return std::unique_ptr<ContainerRuntime>(new BwrapRuntime(
      *std::move(found), run_as, std::make_shared<const std::string>(*std::move(filter))));
}

}  // namespace kiln::local::internal
