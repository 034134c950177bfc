// RoPE's rotation, shared by rope.comp and the q/k mat-vecs' head tails
// (mv.comp -DTAIL), so both rotate alike.

// sin and cos of x for 0 <= |x| < 2^18 * pi/2, to about 1 ulp: x - k*pi/2
// with pi/2 split into six 6-bit pieces and a tail, so k * piece is exact.
void sincos_acc(float x, out float s, out float c) {
    float k = roundEven(x * 0.636619772367581343);
    precise float r = x - k * 1.5625;
    r = r - k * 0.008056640625;
    r = r - k * 0.00023651123046875;
    r = r - k * 3.159046173095703e-06;
    r = r - k * 1.5832483768463135e-08;
    r = r - k * 6.002665031701326e-11;
    r = r - k * 7.443547731314504e-13;
    float z = r * r;
    float sn = r + r * z * (-1.6666654611e-1 + z * (8.3321608736e-3 + z * -1.9515295891e-4));
    float cs = 1.0 - 0.5 * z + z * z * (4.166664568298827e-2 + z * (-1.388731625493765e-3 + z * 2.443315711809948e-5));
    int q = int(k) & 3;
    if (q == 0) { s = sn; c = cs; }
    else if (q == 1) { s = cs; c = -sn; }
    else if (q == 2) { s = -sn; c = -cs; }
    else { s = -cs; c = sn; }
}

// The pair (a, b) = (x[i], x[i + hd/2]) rotated by pos * freq (freq[i] of
// the host's table): the angle one f32 product, as the CPU rounds it.
void rope_rotate(float pos, float freq, float a, float b, out float ra, out float rb) {
    precise float ang = pos * freq; // rounded to f32, never fused
    float sn, cs;
    sincos_acc(ang, sn, cs);
    ra = a * cs - b * sn;
    rb = b * cs + a * sn;
}
