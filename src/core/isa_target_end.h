// Ends the region that core/isa_target.h opened (include it last in the file).
#if LT_ISA_TARGET != 0
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
#endif
