// Persistent dispatches: the workgroups that are running at once find each
// other, share the work by rank, and wait for each other at grid barriers.
// A Vulkan barrier between two dispatches costs ~2.2-2.7 us on the H100 (a
// stage: the GPU drains and starts again); a grid barrier among the
// workgroups of one dispatch ~0.1-0.2 us (bench/vk_stage_probe.c, which is
// its only user so far: see docs/vulkan-backend.md, fifteenth session).
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
#define GRID_CLOSED 0x80000000u
layout(set = 0, binding = GRID_BINDING) volatile coherent buffer GridC { uint grid_c[]; };
shared uint grid_s_rank, grid_s_n;
uint grid_rank, grid_n, grid_epoch;

// Joins the running set; false for a latecomer (which must still call
// grid_finish). Polls up to `wait` times for the rest of the launch to join.
bool grid_join(uint wait) {
    if (gl_LocalInvocationIndex == 0u) {
        const uint launched = gl_NumWorkGroups.x * gl_NumWorkGroups.y * gl_NumWorkGroups.z;
        const uint old = atomicAdd(grid_c[0], 1u);
        uint n = 0u;
        if ((old & GRID_CLOSED) == 0u) {
            for (uint i = 0u; i < wait && (grid_c[0] & ~GRID_CLOSED) < launched; i++) {}
            const uint at_close = atomicOr(grid_c[0], GRID_CLOSED);
            if ((at_close & GRID_CLOSED) == 0u) {
                n = at_close;
                atomicExchange(grid_c[1], n);
            } else {
                while ((n = grid_c[1]) == 0u) {}
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
        atomicAdd(grid_c[2], 1u);
        const uint target = grid_epoch * grid_n;
        while (grid_c[2] < target) {}
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
        }
    }
}
