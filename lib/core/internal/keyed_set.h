// KeyedSet: objects a component owns and finds by a string each of them holds (its name): the
// engine's jobs, a provider's per-job state.
//
// A map from name to object would hold every name twice (the key and the object's own copy,
// a heap block each past std::string's 15 inline characters) in slots the size of the pair. The
// set holds a pointer and the name's hash a slot, compares the objects by their own names, and
// looks one up by a string_view: a table that grows by a job per job (an engine keeps its
// finished jobs) grows by 16 bytes a slot and copies no name. With the hash in the slot, the
// table neither reads an object to rehash it when it grows nor to rule it out when a probe
// meets it: it reads only the object it finds. (An engine's jobs are cold by then: rehashing
// 100,000 of them read each one's name, a cache miss each.) The objects themselves live in a
// Slab (slab.h): no heap block each, and few page faults while the set grows.
//
// KeyOf{}(const T&) returns the object's key as a std::string_view; it must not change while the
// object is in the set. Thread-compatible.
#ifndef KILN_LIB_CORE_INTERNAL_KEYED_SET_H_
#define KILN_LIB_CORE_INTERNAL_KEYED_SET_H_

#include <cstddef>
#include <string_view>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/hash/hash.h"
#include "base/slab.h"

namespace kiln::internal {

template <class T, class KeyOf>
class KeyedSet {
 public:
  KeyedSet() = default;
  KeyedSet(const KeyedSet&) = delete;
  KeyedSet& operator=(const KeyedSet&) = delete;
  ~KeyedSet() { Clear(); }

  // Constructs a T from `args`, adds it and returns it. Throws what the construction or the
  // table's growth throws, and then adds nothing.
  // REQUIRES: no object with the same key is in the set (Find first).
  template <class... Args>
  T& Add(Args&&... args) {
    T* object = slab_.New(std::forward<Args>(args)...);
    try {
      index_.insert(Entry{object, HashOf(KeyOf{}(*object))});
    } catch (...) {
      slab_.Delete(object);
      throw;
    }
    return *object;
  }

  // The object whose key is `key`, or nullptr.
  T* Find(std::string_view key) const {
    auto it = index_.find(Probe{key, HashOf(key)});
    return it == index_.end() ? nullptr : it->object;
  }

  // Destroys `object`. REQUIRES: it is in this set.
  void Erase(const T& object) {
    auto it = Locate(object);
    T* found = it->object;
    index_.erase(it);
    slab_.Delete(found);
  }

  // Takes `object` out of the set without destroying it: Find no longer finds
  // it, and another object may take its key. The caller destroys it later
  // with Destroy (the set's destruction does not). REQUIRES: it is in this set.
  void Unlink(const T& object) { index_.erase(Locate(object)); }

  // Destroys an object that Unlink took out.
  void Destroy(T* object) { slab_.Delete(object); }

  // Destroys every object.
  void Clear() {
    Index objects;
    objects.swap(index_);  // (a destructor that looks in the set finds it empty)
    for (const Entry& e : objects) slab_.Delete(e.object);
  }

  size_t size() const { return index_.size(); }

 private:
  static size_t HashOf(std::string_view key) {
    return absl::Hash<absl::string_view>()(absl::string_view(key.data(), key.size()));
  }
  // A slot: the object and its key's hash.
  struct Entry {
    T* object;
    size_t hash;
  };
  // A lookup: a key and its hash.
  struct Probe {
    std::string_view key;
    size_t hash;
  };
  struct Hash {
    using is_transparent = void;
    size_t operator()(const Entry& e) const { return e.hash; }
    size_t operator()(const Probe& p) const { return p.hash; }
  };
  struct Eq {
    using is_transparent = void;
    bool operator()(const Entry& a, const Entry& b) const {
      return a.hash == b.hash && KeyOf{}(*a.object) == KeyOf{}(*b.object);
    }
    bool operator()(const Entry& e, const Probe& p) const {
      return e.hash == p.hash && KeyOf{}(*e.object) == p.key;
    }
    bool operator()(const Probe& p, const Entry& e) const { return (*this)(e, p); }
  };
  using Index = absl::flat_hash_set<Entry, Hash, Eq>;

  typename Index::iterator Locate(const T& object) {
    const std::string_view key = KeyOf{}(object);
    return index_.find(Probe{key, HashOf(key)});
  }

  Slab<T> slab_;  // before index_: outlives every object
  Index index_;

 public:
  // Iteration over the objects (as T&), in no particular order. Add and Erase invalidate
  // iterators.
  class iterator {
   public:
    T& operator*() const { return *it_->object; }
    T* operator->() const { return it_->object; }
    iterator& operator++() {
      ++it_;
      return *this;
    }
    friend bool operator==(const iterator& a, const iterator& b) { return a.it_ == b.it_; }
    friend bool operator!=(const iterator& a, const iterator& b) { return a.it_ != b.it_; }

   private:
    friend class KeyedSet;
    explicit iterator(typename Index::const_iterator it) : it_(it) {}
    typename Index::const_iterator it_;
  };
  iterator begin() const { return iterator(index_.begin()); }
  iterator end() const { return iterator(index_.end()); }
};

}  // namespace kiln::internal

#endif  // KILN_LIB_CORE_INTERNAL_KEYED_SET_H_
