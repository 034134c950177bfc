// Persistent dispatches: the workgroups that are running at once find each
// other, share the work by rank, and wait for each other at grid barriers.
// Measured on the H100 (bench/vk_stage_probe.c, its only user; see
// docs/vulkan-backend.md, fifteenth session): a grid barrier costs about
// what a Vulkan barrier between two dispatches does, 1.8-2.7 us, more with
// over 500 workgroups polling, so persistence saves no time by itself.
//
// Vulkan does not promise that the workgroups of a dispatch run at once, so
// waiting for one that has not started could hang. Hence discovery: a
// workgroup joins only while the poll is open; the first joiner to close it
// publishes the count. Every joiner had started before the close and keeps
// running (a started workgroup is not descheduled for an unstarted one), so
// the joiners only ever wait for each other. Latecomers leave at once.
// Counters (binding GRID_BINDING, zero between dispatches: the last
// workgroup of the dispatch puts them back):
//   [0] joined (bit 31: closed)  [1] participants  [2] arrivals  [3] done
//   [4] with GRID_FLAG: the last barrier released (its number)
#define GRID_CLOSED 0x80000000u
layout(set = 0, binding = GRID_BINDING) volatile coherent buffer GridC { uint grid_c[]; };
shared uint grid_s_rank, grid_s_n;

// Reads a counter in a spin loop: an atomic, not a load of the volatile
// binding. NVIDIA's compiler and lavapipe hoisted such a load out of an empty
// loop, which then never waited (found by a persistent GEGLU whose outputs
// were read before they were all written; its logits now match).
#ifdef GRID_FLAG
// GRID_FLAG: the spins read with atomic loads (no read-modify-write to
// queue behind at the counter's L2 slice)
#extension GL_KHR_memory_scope_semantics : require
uint grid_load(uint i) {
    return atomicLoad(grid_c[i], gl_ScopeDevice, gl_StorageSemanticsBuffer, gl_SemanticsRelaxed);
}
#else
uint grid_load(uint i) { return atomicAdd(grid_c[i], 0u); }
#endif
uint grid_rank, grid_n, grid_epoch;

// Joins the running set; false for a latecomer (which must still call
// grid_finish). Polls up to `wait` times for the rest of the launch to join.
bool grid_join(uint wait) {
    if (gl_LocalInvocationIndex == 0u) {
        const uint launched = gl_NumWorkGroups.x * gl_NumWorkGroups.y * gl_NumWorkGroups.z;
        const uint old = atomicAdd(grid_c[0], 1u);
        uint n = 0u;
        if ((old & GRID_CLOSED) == 0u) {
            for (uint i = 0u; i < wait && (grid_load(0u) & ~GRID_CLOSED) < launched; i++) {}
            const uint at_close = atomicOr(grid_c[0], GRID_CLOSED);
            if ((at_close & GRID_CLOSED) == 0u) {
                n = at_close;
                atomicExchange(grid_c[1], n);
            } else {
                while ((n = grid_load(1u)) == 0u) {}
            }
        }
        grid_s_rank = old & ~GRID_CLOSED;
        grid_s_n = n;
    }
    barrier();
    grid_rank = grid_s_rank;
    grid_n = grid_s_n;
    grid_epoch = 0u;
    return grid_n != 0u;
}

// Every participant's writes before it are visible to every participant
// after it (reads after it must go through coherent bindings).
void grid_sync() {
    memoryBarrierBuffer();
    barrier();
    grid_epoch++;
    if (gl_LocalInvocationIndex == 0u) {
        const uint target = grid_epoch * grid_n;
#ifdef GRID_FLAG
        // the last to arrive raises the flag; the others watch the flag,
        // not the counter every arrival adds to
        if (atomicAdd(grid_c[2], 1u) == target - 1u) atomicExchange(grid_c[4], grid_epoch);
        else
            while (grid_load(4u) < grid_epoch) {}
#else
        atomicAdd(grid_c[2], 1u);
        while (grid_load(2u) < target) {}
#endif
    }
    barrier();
    memoryBarrierBuffer();
}

// Every workgroup of the dispatch calls it last; the last one resets the
// counters for the next dispatch.
void grid_finish() {
    if (gl_LocalInvocationIndex == 0u) {
        const uint launched = gl_NumWorkGroups.x * gl_NumWorkGroups.y * gl_NumWorkGroups.z;
        if (atomicAdd(grid_c[3], 1u) == launched - 1u) {
            grid_c[0] = 0u;
            grid_c[1] = 0u;
            grid_c[2] = 0u;
            grid_c[3] = 0u;
#ifdef GRID_FLAG
            grid_c[4] = 0u;
#endif
        }
    }
}
