# Kiln's dependencies, all from Debian 12's packages (cmake/install-deps.sh
# installs them). kilnConfig.cmake.in repeats the ones an installed Kiln needs.
find_package(absl CONFIG REQUIRED)
find_package(Protobuf REQUIRED)          # CMake's FindProtobuf: Debian ships no config
find_package(fmt CONFIG REQUIRED)
find_package(PkgConfig REQUIRED)
# PCRE2: the service model's patterns use \p{L} classes and look-behind, which
# neither std::regex nor RE2 supports; metric regexes are PCRE-style too.
pkg_check_modules(PCRE2 REQUIRED IMPORTED_TARGET GLOBAL libpcre2-8)
find_package(Threads REQUIRED)
# libarchive: the local backend unpacks image tarballs and packs model.tar.gz.
find_package(LibArchive REQUIRED)      # CMake's FindLibArchive (LibArchive::LibArchive)
# libfuse3: the local backend's FastFile view of sources that are not local
# (s3://) is a read-only FUSE mount read lazily through the ObjectStore.
pkg_check_modules(FUSE3 REQUIRED IMPORTED_TARGET GLOBAL fuse3)
# libseccomp: the bwrap runtime hands bubblewrap a seccomp filter that refuses
# the system calls containers never need (mount, module loading, kexec, ...);
# libseccomp knows each architecture's syscall numbers and writes the BPF.
pkg_check_modules(SECCOMP REQUIRED IMPORTED_TARGET GLOBAL libseccomp)
# zlib: Pipe-mode channels with CompressionType Gzip are decompressed on the way.
find_package(ZLIB REQUIRED)            # CMake's FindZLIB (ZLIB::ZLIB)
# libcurl and OpenSSL's libcrypto: kiln::aws speaks HTTP(S) to S3 through
# libcurl and signs requests (SigV4: HMAC-SHA256) with libcrypto.
find_package(CURL REQUIRED)            # CMake's FindCURL (CURL::libcurl)
find_package(OpenSSL REQUIRED)         # CMake's FindOpenSSL (OpenSSL::Crypto)
# SQLite: kiln::journal_sqlite keeps the engine's journal in one database.
find_package(SQLite3 REQUIRED)         # CMake's FindSQLite3 (SQLite::SQLite3)
# Boost (headers only): kiln::serve answers HTTP with Boost.Beast on Boost.Asio.
find_package(Boost 1.74 REQUIRED)
# gRPC (with its protoc plugin): the sessions between the controller and the
# agent on each host (kiln::agent), over mutual TLS.
find_package(gRPC CONFIG REQUIRED)
